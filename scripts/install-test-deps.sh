#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian 12 machine (as root, or with sudo): each
# installer in scripts/deps/ in turn, each idempotent (a second run changes nothing).
# VBMQ_DEPS_DRY_RUN=1 only simulates the installs (see scripts/deps/lib.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# base first: the sources and the compiler the others rely on.
for name in base bench guest fuzz ceph; do
    start=$SECONDS
    echo "== scripts/deps/$name.sh"
    status=0
    bash "scripts/deps/$name.sh" || status=$?
    if ((status)); then
        echo "install-test-deps.sh: scripts/deps/$name.sh failed (status $status)" >&2
        exit "$status"
    fi
    echo "== scripts/deps/$name.sh: done in $((SECONDS - start)) s"
done
