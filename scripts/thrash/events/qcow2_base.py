"""A thin disk added at run time over a qcow2 golden image that has a raw backing file of its
own (`base=golden.qcow2`, qcow2 over raw, made by qemu-img and qemu-io once per run): `vbmq ctl
add-disk` walks the chain and passes its files to the confined vbmq, which reads them through
its qcow2 reader. Checked: a snapshot of the new disk holds exactly the chain's bytes as
`qemu-img convert -O raw` reads them; then the disk is removed and its files deleted."""

import os

from .. import host
from ..checks import stamped_blocks
from ..common import BLOCKS, broken, log


def golden(t):
    """The golden chain (made on first use) and its bytes as QEMU reads them."""
    image = t.path("golden.qcow2")
    raw = t.path("golden-as-qemu.raw")
    if not os.path.exists(raw):
        lower = t.path("golden-lower.raw")
        with open(lower, "wb") as f:
            f.write(stamped_blocks(BLOCKS))
        host.run("qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096",
                 "-b", lower, "-F", "raw", image)
        # Data, zero clusters and clusters left to the backing file, at random places.
        ops = []
        for _ in range(8):
            offset = t.rng.randrange(BLOCKS - 4) * 4096
            ops += ["-c", f"write -P {t.rng.randrange(256)} {offset} 12k",
                    "-c", f"write -z {t.rng.randrange(BLOCKS - 4) * 4096} 8k"]
        host.run("qemu-io", "-f", "qcow2", *ops, image)
        host.run("qemu-img", "convert", "-f", "qcow2", "-O", "raw", image, raw)
    return image, raw


def qcow2_base(t):
    image, raw = golden(t)
    t.qcow2_bases = getattr(t, "qcow2_bases", 0) + 1
    name = f"qbase-{t.qcow2_bases}"
    disk, snap = t.path(f"{name}.img"), t.path(f"snap/{name}.raw")
    if t.ctl("add-disk", f"socket={t.sock(name)},path={disk},base={image}") is None:
        return
    try:
        if t.ctl("snapshot", t.sock(name), snap, "--force", timeout=300) is None:
            return
        with open(snap, "rb") as f:
            got = f.read()
        want_path = t.path("golden-lower.raw") if broken("qcow2-base") else raw
        with open(want_path, "rb") as f:
            want = f.read()
        if got != want:
            first = next((i for i in range(0, min(len(got), len(want)), 4096)
                          if got[i:i + 4096] != want[i:i + 4096]), min(len(got), len(want)))
            t.error(f"qcow2-base: the disk over {os.path.basename(image)} differs from "
                    f"qemu-img's reading at byte {first} ({len(got)} bytes against {len(want)})")
        else:
            log(f"qcow2-base: {name} over the qcow2 chain reads as qemu-img reads it "
                f"({len(got) >> 20} MiB)")
    finally:
        t.ctl("remove-disk", t.sock(name))
        for path in (snap, disk, f"{disk}.map"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
