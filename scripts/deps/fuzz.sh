#!/usr/bin/env bash
# cargo-fuzz (libFuzzer) for the fuzz smoke run; it builds on the stable toolchain with
# RUSTC_BOOTSTRAP=1 (see scripts/fuzz-smoke.sh).
set -euo pipefail
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked --quiet
fi
