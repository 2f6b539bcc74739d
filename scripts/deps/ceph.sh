#!/usr/bin/env bash
# What the Ceph RBD tests need (feature ceph-tests): a single-node cluster's daemons (ceph-mon,
# ceph-osd), the client tools that set it up (ceph, rbd, ceph-authtool, monmaptool from
# ceph-common), librbd (librbd1, which vbmq loads with dlopen for an rbd= disk: building vbmq
# needs no Ceph headers), and QEMU's rbd block driver (qemu-block-extra, the backports build
# matching qemu-utils 10) for the bench's qemu-storage-daemon comparison.
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

packages=(ceph-mon ceph-osd ceph-common librbd1 uuid-runtime qemu-block-extra)

ensure_backports
# With backports preferred: Ceph itself comes from bookworm (backports has none), qemu-block-extra
# from backports to match QEMU 10, and shared libraries the other installers already took from
# backports (libelf1 with QEMU) keep their siblings in step (libdw1 must equal libelf1's version;
# from bookworm alone the install fails on a fresh image).
mapfile -t todo < <(missing_packages "${packages[@]}")
if ((${#todo[@]})); then
    apt_install -t "$codename-backports" "${todo[@]}"
else
    say "already installed: ${packages[*]}"
fi
if ((dry_run)); then exit 0; fi

for tool in ceph-mon ceph-osd ceph rbd ceph-authtool monmaptool uuidgen; do
    command -v "$tool" >/dev/null || die "$tool missing after installing ${packages[*]}"
done
[[ -n $(find /usr/lib -name librbd.so.1 -print -quit) ]] ||
    die "librbd.so.1 missing after installing librbd1"

say "ceph: $(ceph --version)"
