#!/usr/bin/env bash
# What every test area shares, on a fresh Debian 12 machine: bookworm-backports (QEMU 10) on the
# bookworm mirror, and a C/C++ toolchain: rustc links through `cc`, and libfuzzer-sys compiles
# libFuzzer's C++. (The `blkio` crate is pure Rust: no meson, ninja, pkg-config or libclang.)
# ca-certificates lets cargo fetch crates over HTTPS. xfsprogs: the snapshot test's XFS with
# reflink (mkfs.xfs). libnbd-bin: nbdinfo and nbdcopy, the NBD export tests' clients. openssl:
# the NBD-over-TLS tests' certificates.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

ensure_backports
mapfile -t missing < <(missing_packages gcc g++ libc6-dev ca-certificates xfsprogs libnbd-bin openssl)
if ((${#missing[@]})); then
    apt_install "${missing[@]}"
else
    say "gcc, g++, libc6-dev, ca-certificates, xfsprogs, libnbd-bin, openssl: installed"
fi
