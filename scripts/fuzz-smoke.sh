#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each; FUZZ_SECONDS to change).
# A crash fails the run and leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
export RUSTC_BOOTSTRAP=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo fuzz list); do
    echo "== fuzz $target for ${seconds}s"
    status=0
    cargo fuzz run "$target" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        >"$log" 2>&1 || status=$?
    grep -E '^#[0-9]+ +DONE|^Done [0-9]+ runs' "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 60 "$log"
        echo "fuzz target $target failed (status $status)"
        exit 1
    fi
done
