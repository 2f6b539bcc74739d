#!/usr/bin/env bash
# Installs what the tests need, then runs them all: unit, integration (the real vbmq process
# driven by libblkio), hostile-frontend battery, confinement and real Linux guests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo test --release --all-targets
