#!/usr/bin/env bash
# What `vbmq bench` compares against: qemu-storage-daemon 10 (Debian's qemu-utils from
# bookworm-backports; bookworm's own 7.2 lacks what the comparison needs), and virtiofsd 1.14
# (built from crates.io; Debian 12's is 1.5) for the virtio-fs study.
# vbmq bench runs without them too, skipping those systems with a line saying so.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

# The first line of `qemu-storage-daemon --version`, empty if there is none.
qsd_version() {
    local v
    v=$(qemu-storage-daemon --version 2>/dev/null) || return 0
    echo "${v%%$'\n'*}"
}
qsd_ok() { [[ $(qsd_version) =~ version\ (1[0-9]|[2-9][0-9])\. ]]; }

virtiofsd_version=1.14.0
virtiofsd_ok() { [[ $(virtiofsd --version 2>/dev/null) == *"$virtiofsd_version"* ]]; }

ensure_backports
if qsd_ok; then
    say "qemu-storage-daemon: $(qsd_version)"
else
    apt_install -t "$codename-backports" qemu-utils
    if ! ((dry_run)); then
        qsd_ok || die "qemu-storage-daemon 10 did not install: '$(qsd_version)'"
        say "qemu-storage-daemon: $(qsd_version)"
    fi
fi

export PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin"
if virtiofsd_ok; then
    say "virtiofsd: $(virtiofsd --version | head -n 1)"
    exit 0
fi
command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) first"
# Its build links libseccomp and libcap-ng.
apt_install libseccomp-dev libcap-ng-dev pkg-config
if ((dry_run)); then
    say "(dry run) would run: cargo install virtiofsd --version $virtiofsd_version --locked"
    exit 0
fi
say "cargo install virtiofsd --version $virtiofsd_version --locked (about a minute)"
cargo install virtiofsd --version "$virtiofsd_version" --locked --quiet
virtiofsd_ok || die "virtiofsd $virtiofsd_version did not install"
say "virtiofsd: $(virtiofsd --version | head -n 1)"
