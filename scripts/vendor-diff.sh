#!/usr/bin/env bash
# Prints the whole delta of each vendored crate (or those named) against its crates.io release:
# the release is fetched into cargo's registry by a throwaway project without vbmq's
# [patch.crates-io], then `diff -ru` release vendor/CRATE. Exit 0 whatever the diff holds.
set -euo pipefail
cd "$(dirname "$0")/.."
crates=("$@")
if ((${#crates[@]} == 0)); then
    for dir in vendor/*/; do crates+=("$(basename "$dir")"); done
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
registry=${CARGO_HOME:-$HOME/.cargo}/registry/src
for crate in "${crates[@]}"; do
    manifest=vendor/$crate/Cargo.toml
    name=$(sed -n '/^\[package\]/,/^\[/s/^name = "\(.*\)"/\1/p' "$manifest" | head -n 1)
    version=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$manifest" | head -n 1)
    mkdir -p "$scratch/$crate/src"
    touch "$scratch/$crate/src/lib.rs"
    printf '[package]\nname = "fetch-%s"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n%s = "=%s"\n' \
        "$crate" "$name" "$version" >"$scratch/$crate/Cargo.toml"
    cargo fetch --quiet --manifest-path "$scratch/$crate/Cargo.toml"
    release=$(find "$registry" -maxdepth 2 -type d -name "$name-$version" | head -n 1)
    if [[ -z $release ]]; then
        echo "vendor-diff.sh: $name $version is not in $registry after cargo fetch" >&2
        exit 1
    fi
    echo "== $name $version: $release -> vendor/$crate"
    diff -ru --exclude=.cargo-ok --exclude=target "$release" "vendor/$crate" || true
done
