#!/usr/bin/env bash
# cargo-fuzz (libFuzzer) for the fuzz smoke run; it builds on the stable toolchain with
# RUSTC_BOOTSTRAP=1 (see scripts/fuzz-smoke.sh). Needs Rust (rustup) and base.sh's C++ compiler.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) first"
if version=$(cargo fuzz --version 2>/dev/null); then
    say "$version: installed"
elif ((dry_run)); then
    say "(dry run) would run: cargo install cargo-fuzz --locked"
else
    say "cargo install cargo-fuzz --locked (a few minutes)"
    cargo install cargo-fuzz --locked --quiet
    say "$(cargo fuzz --version)"
fi
