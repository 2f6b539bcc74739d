#!/usr/bin/env bash
# What `vbmq bench` compares against: qemu-storage-daemon 10 (Debian's qemu-utils from
# bookworm-backports; bookworm's own 7.2 lacks what the comparison needs).
# vbmq bench runs without it too, skipping Baseline, VBDP and null-co with a line saying so.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

# The first line of `qemu-storage-daemon --version`, empty if there is none.
qsd_version() {
    local v
    v=$(qemu-storage-daemon --version 2>/dev/null) || return 0
    echo "${v%%$'\n'*}"
}
qsd_ok() { [[ $(qsd_version) =~ version\ (1[0-9]|[2-9][0-9])\. ]]; }

ensure_backports
if qsd_ok; then
    say "qemu-storage-daemon: $(qsd_version)"
    exit 0
fi
apt_install -t "$codename-backports" qemu-utils
if ((dry_run)); then exit 0; fi
qsd_ok || die "qemu-storage-daemon 10 did not install: '$(qsd_version)'"
say "qemu-storage-daemon: $(qsd_version)"
