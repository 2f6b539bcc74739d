#!/usr/bin/env bash
# What the guest end-to-end tests (tests/guest_*.rs) need: QEMU 10 from bookworm-backports, the
# guest userland (busybox, fio, e2fsprogs, util-linux, cpio, kmod), libvirt, and a Debian guest kernel
# unpacked into a cache directory that later runs reuse.
#
#   VBMQ_GUEST_CACHE  where the kernel is unpacked (default ~/.cache/vbmq-guest)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

cache="${VBMQ_GUEST_CACHE:-$HOME/.cache/vbmq-guest}"

# The first line of `qemu-system-x86_64 --version`, empty if there is none.
qemu_version() {
    local v
    v=$(qemu-system-x86_64 --version 2>/dev/null) || return 0
    echo "${v%%$'\n'*}"
}
qemu_ok() { [[ $(qemu_version) =~ version\ (1[0-9]|[2-9][0-9])\. ]]; }

ensure_backports

mapfile -t missing < <(missing_packages fio busybox-static e2fsprogs cpio util-linux kmod dmsetup)
if ((${#missing[@]})); then
    apt_install "${missing[@]}"
else
    say "fio, busybox-static, e2fsprogs, cpio, util-linux, kmod, dmsetup: installed"
fi

if qemu_ok; then
    say "qemu-system-x86_64: $(qemu_version)"
else
    apt_install -t "$codename-backports" qemu-system-x86 qemu-system-common
    if ! ((dry_run)); then
        qemu_ok || die "QEMU 10 did not install: qemu-system-x86_64 says '$(qemu_version)'"
        say "qemu-system-x86_64: $(qemu_version)"
    fi
fi

# libvirt, for the test in which libvirt launches vbmq as a VM's virtio-fs backend
# (tests/guest_libvirt.rs starts its own libvirtd; no libvirt-daemon-system, no service).
mapfile -t missing < <(missing_packages libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients)
if ((${#missing[@]})); then
    apt_install "${missing[@]}"
else
    say "libvirt-daemon, libvirt-daemon-driver-qemu, libvirt-clients: installed"
fi

# The guest kernel: linux-image-amd64 is a metapackage; the image is its dependency.
stamp="$cache/kernel/.complete"
if [[ -f $stamp ]]; then
    say "guest kernel: $(basename "$(ls "$cache/kernel/boot/"vmlinuz-*)") in $cache/kernel"
    exit 0
fi
meta=linux-image-amd64
image=$(apt-cache depends "$meta" | awk '/Depends: linux-image-[0-9]/ && !m { m = $2 } END { print m }')
[[ -n $image ]] || die "cannot resolve the package behind $meta (apt-cache depends $meta)"
# As root apt-get download would warn that its _apt sandbox cannot write to the cache.
download=(apt-get download)
[[ $(id -u) -ne 0 ]] || download+=(-o APT::Sandbox::User=root)
if ((dry_run)); then
    say "(dry run) would download $image and unpack it into $cache/kernel:"
    "${download[@]}" --print-uris "$image"
    exit 0
fi
say "downloading $image into $cache"
rm -rf "$cache/debs"
mkdir -p "$cache/debs"
cd "$cache/debs"
"${download[@]}" -q "$image" || die "'${download[*]} -q $image' failed with status $?"
debs=("$cache/debs/${image}_"*.deb)
[[ -f ${debs[0]} ]] || die "apt-get download $image left no ${image}_*.deb in $cache/debs"
rm -rf "$cache/kernel"
mkdir -p "$cache/kernel"
dpkg -x "${debs[0]}" "$cache/kernel"
modules=("$cache/kernel/lib/modules/"*)
version=$(basename "${modules[0]}")
[[ -f $cache/kernel/boot/vmlinuz-$version ]] || die "${debs[0]} holds no boot/vmlinuz-$version"
# The package ships no modules.dep (its postinst makes it): build it for the initramfs.
depmod -b "$cache/kernel" "$version"
rm -rf "$cache/debs"
touch "$stamp"
say "guest kernel: vmlinuz-$version in $cache/kernel"
