#!/usr/bin/env bash
# Installs what the guest end-to-end tests (tests/guest_*.rs) need, idempotently:
# QEMU 10 from bookworm-backports, the guest userland (busybox, fio, e2fsprogs, util-linux, cpio)
# and a Debian guest kernel unpacked into a cache directory that later runs reuse.
#
#   VBMQ_GUEST_CACHE  where the kernel is unpacked (default ~/.cache/vbmq-guest)
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

cache="${VBMQ_GUEST_CACHE:-$HOME/.cache/vbmq-guest}"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"

backports=/etc/apt/sources.list.d/backports.sources
if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    $sudo tee "$backports" >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    $sudo apt-get update
fi

# Another apt user (a parallel installer) may hold the lock for a while: wait for it.
apt_get() {
    $sudo apt-get -o DPkg::Lock::Timeout=600 "$@"
}

qemu_ok() {
    command -v qemu-system-x86_64 >/dev/null &&
        qemu-system-x86_64 --version | grep -Eq 'version (1[0-9]|[2-9][0-9])\.'
}
host_pkgs=(fio busybox-static e2fsprogs cpio util-linux kmod)
missing=()
for p in "${host_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})) || ! qemu_ok; then
    export DEBIAN_FRONTEND=noninteractive
    apt_get update
    ((${#missing[@]})) && apt_get install -y --no-install-recommends "${missing[@]}"
    qemu_ok || apt_get install -y --no-install-recommends -t bookworm-backports \
        qemu-system-x86 qemu-system-common
fi

# The guest kernel: linux-image-amd64 is a metapackage; the image is its dependency.
stamp="$cache/kernel/.complete"
if [[ ! -f $stamp ]]; then
    mkdir -p "$cache/debs"
    meta=linux-image-amd64
    resolve() { apt-cache depends "$meta" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
    image=$(resolve)
    [[ -n $image ]] || { apt_get update && image=$(resolve); }
    [[ -n $image ]] || { echo "guest.sh: cannot resolve the package behind $meta" >&2; exit 1; }
    # apt-get download writes into the current directory; as root it warns about the _apt sandbox.
    (cd "$cache/debs" && apt-get download "$meta" "$image" 2>&1 | grep -v 'sandbox' || true)
    deb=$(ls "$cache/debs/${image}_"*.deb 2>/dev/null | head -n1)
    [[ -n $deb ]] || { echo "guest.sh: download of $image failed" >&2; exit 1; }
    rm -rf "$cache/kernel"
    mkdir -p "$cache/kernel"
    dpkg -x "$deb" "$cache/kernel"
    version=$(basename "$(ls -d "$cache/kernel/lib/modules/"*)")
    # The package ships no modules.dep (its postinst makes it): build it for the initramfs.
    depmod -b "$cache/kernel" "$version"
    ls "$cache/kernel/boot/vmlinuz-$version" >/dev/null
    rm -rf "$cache/debs"
    touch "$stamp"
fi
echo "guest.sh: kernel $(basename "$(ls "$cache/kernel/boot/"vmlinuz-*)") in $cache/kernel"
