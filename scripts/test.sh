#!/usr/bin/env bash
# Installs what the tests need, then runs them all: unit, integration (the real vbmq process
# driven by libblkio), hostile-frontend battery, confinement, real Linux guests, and a bounded
# run of every fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh || {
    echo "test.sh: installing the test dependencies failed (see above); no tests ran" >&2
    exit 1
}
cargo test --release --all-targets
bash scripts/fuzz-smoke.sh
