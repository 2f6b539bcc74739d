#!/usr/bin/env bash
# Packs the test guest's initramfs (uncompressed newc cpio: under TCG copying is cheaper than
# decompressing): static busybox, fio, e2fsprogs, blkdiscard/fstrim with their shared libraries,
# the virtio/ext4 kernel modules with their dependencies from modules.dep, and scripts/guest/init.sh
# as /init. The harness appends a second archive holding /test.sh.
#
#   build-initramfs.sh OUTPUT
#   VBMQ_GUEST_CACHE  where scripts/deps/guest.sh unpacked the kernel (default ~/.cache/vbmq-guest)
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

out=${1:?usage: build-initramfs.sh OUTPUT}
here=$(cd "$(dirname "$0")" && pwd)
cache="${VBMQ_GUEST_CACHE:-$HOME/.cache/vbmq-guest}"
die() {
    echo "build-initramfs.sh: $*; run scripts/deps/guest.sh" >&2
    exit 1
}

kdir=$(ls -d "$cache/kernel/lib/modules/"*/ 2>/dev/null | head -n1) || true
[[ -n $kdir && -f $kdir/modules.dep ]] || die "no guest kernel modules in $cache/kernel"
version=$(basename "$kdir")

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,dev,proc,sys,tmp,mnt}
ln -s usr/bin "$stage/bin"
ln -s usr/sbin "$stage/sbin"
ln -s usr/lib "$stage/lib"
ln -s usr/lib64 "$stage/lib64"

busybox=$(command -v busybox) || die "busybox missing"
ldd "$busybox" >/dev/null 2>&1 && die "$busybox is not static (install busybox-static)"
install -m755 "$busybox" "$stage/usr/bin/busybox"
install -m755 "$here/init.sh" "$stage/init"

# Copies a binary and every library the loader will map for it, at the paths ldd reports.
copy_with_libs() {
    local bin=$1 dest=$2 lib
    install -m755 "$bin" "$stage$dest"
    for lib in $(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
        [[ -e $stage$lib ]] && continue
        mkdir -p "$stage$(dirname "$lib")"
        cp -L "$lib" "$stage$lib"
    done
}
for tool in fio; do
    copy_with_libs "$(command -v "$tool")" "/usr/bin/$tool" || die "$tool missing"
done
for tool in mke2fs e2fsck blkdiscard fstrim; do
    copy_with_libs "$(command -v "$tool")" "/usr/sbin/$tool" || die "$tool missing"
done
ln -s mke2fs "$stage/usr/sbin/mkfs.ext4"
[[ -f /etc/mke2fs.conf ]] && cp /etc/mke2fs.conf "$stage/etc/"

# Modules in load order: every dependency (from modules.dep) before the module needing it.
# crc32c_generic is ext4's soft dependency; the guest has no modprobe to load it on demand.
declare -A seen=()
order=()
dep_line() { awk -v m="$1" -F: '{ n = $1; sub(/.*\//, "", n); sub(/\.ko.*/, "", n); gsub(/-/, "_", n) } n == m { print; exit }' "$kdir/modules.dep"; }
add_module() {
    local name=${1//-/_} line path dep
    line=$(dep_line "$name")
    [[ -n $line ]] || die "module $name not in $kdir/modules.dep"
    path=${line%%:*}
    [[ -n ${seen[$path]:-} ]] && return
    seen[$path]=1
    for dep in ${line#*:}; do
        dep=$(basename "$dep")
        add_module "${dep%%.ko*}"
    done
    order+=("$path")
}
for module in virtio_pci virtio_blk crc32c_generic ext4 virtiofs; do
    add_module "$module"
done
for path in "${order[@]}"; do
    mkdir -p "$stage/lib/modules/$version/$(dirname "$path")"
    case $path in
    *.ko) cp "$kdir/$path" "$stage/lib/modules/$version/$path" ;;
    *) die "compressed module $path is not supported (busybox insmod)" ;;
    esac
    echo "$path"
done >"$stage/etc/modules.order"

mkdir -p "$(dirname "$out")"
(cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out.tmp.$$"
mv "$out.tmp.$$" "$out"
