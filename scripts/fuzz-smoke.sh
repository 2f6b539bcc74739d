#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 60 s each; FUZZ_SECONDS to change).
# A crash fails the run and leaves its input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
    echo "== fuzz $target for ${seconds}s"
    cargo fuzz run "$target" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 2>&1 |
        grep -E '^#[0-9]+ +(DONE|INITED)|^Done|ERROR|panicked|SUMMARY' || true
    # cargo fuzz exits non-zero on a crash; PIPESTATUS keeps that through the filter.
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz target $target failed"; exit 1; }
done
