#!/usr/bin/env bash
# Installs what `vbmq bench` compares against, idempotently: qemu-storage-daemon 10 (Debian's
# qemu-utils from bookworm-backports; bookworm's own 7.2 lacks what the comparison needs).
# vbmq bench runs without it too, skipping Baseline, VBDP and null-co with a line saying so.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

qsd_ok() {
    command -v qemu-storage-daemon >/dev/null &&
        grep -Eq 'version (1[0-9]|[2-9][0-9])\.' <<<"$(qemu-storage-daemon --version)"
}
if qsd_ok; then
    exit 0
fi

if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=$(grep -rhoE 'https?://[^ ]+/debian/?' /etc/apt/sources.list.d/ /etc/apt/sources.list 2>/dev/null | head -n1 || true)
    mirror=${mirror:-http://deb.debian.org/debian}
    $sudo tee /etc/apt/sources.list.d/backports.sources >/dev/null <<SRC
Types: deb
URIs: ${mirror%/}
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi

# Another installer may hold the apt lock for a while: wait for it rather than fail.
apt_get() {
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@"
}
if ! grep -q bookworm-backports <<<"$(apt-cache policy qemu-utils 2>/dev/null)"; then
    apt_get update -qq
fi
apt_get install -y -q -t bookworm-backports qemu-utils
qsd_ok || { echo "qemu-storage-daemon 10 did not install" >&2; exit 1; }
