#!/usr/bin/env bash
# Installs what the tests need, then runs them all: unit, integration (the real vbmq process
# driven by libblkio), hostile-frontend battery, confinement, real Linux guests, and a bounded
# run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo test --release --workspace --all-targets
bash scripts/fuzz-smoke.sh
