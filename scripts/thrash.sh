#!/usr/bin/env bash
# The thrasher (issue 37, docs/thrash.md): random life events and host faults inflicted on a
# confined vbmq under a verifying guest and libblkio clients, for N minutes.
#
#   scripts/thrash.sh [--minutes N] [--seed S] [--inflight off]
#   VBMQ_THRASH_BIN=PATH scripts/thrash.sh ...   (that vbmq instead of target/release/vbmq)
#
# Builds vbmq and the libblkio client, then runs scripts/thrash/ (Python); it removes what it
# made (processes, loop devices, mounts) on success, failure or Ctrl-C. Needs root (loop
# devices, mounts) and the guest prerequisites (scripts/deps/guest.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --bin vbmq -p vbmq-cli
cargo build --release --quiet --example thrash_client --example thrash_share_client -p vbmq-bench
cd scripts
exec python3 -m thrash "$@"
