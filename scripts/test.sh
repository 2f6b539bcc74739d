#!/usr/bin/env bash
# Installs what the tests need, then runs them all: unit, integration (the real vbmq process
# driven by libblkio), hostile-frontend battery, confinement, loop devices, real Linux guests,
# 3 minutes of the thrasher (random life events and host faults under verifying writers), and a
# bounded run of every fuzz target. A test skipped for a missing prerequisite fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh || {
    echo "test.sh: installing the test dependencies failed (see above); no tests ran" >&2
    exit 1
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
features=vbmq-cli/guest-tests,vbmq-cli/root-tests,vbmq-cli/ceph-tests
echo "== cargo fmt --check, cargo clippy (warnings denied)"
cargo fmt --all --check
cargo clippy --release --workspace --all-targets --features "$features" -- -D warnings
python3 scripts/import-graph-test.py  # the graph script finds circles in nested modules
python3 scripts/import-graph.py -q  # the module graph: no circle, at most one arrow back up
python3 scripts/long-functions.py  # no production function over 120 lines
echo "== cargo test (every crate, guest, root and Ceph tests included)"
cargo test --release --workspace --all-targets --features "$features" \
    2>&1 | tee "$log"
if grep -q 'ignored, needs feature' "$log"; then
    echo "test.sh: tests were skipped for a missing feature (see above)" >&2
    exit 1
fi
echo "== the thrasher, 3 minutes (docs/thrash.md; a failure prints --seed S to reproduce it)"
bash scripts/thrash.sh --minutes 3
bash scripts/fuzz-smoke.sh
