#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian 12 machine (run as root): every
# scripts/deps/*.sh, each idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
for installer in scripts/deps/*.sh; do
    [ -e "$installer" ] || continue
    echo "== $installer"
    bash "$installer"
done
