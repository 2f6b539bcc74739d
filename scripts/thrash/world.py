"""The world the thrasher builds: its images, the disk of each kind, and vbmq's config file."""

import json
import os
import subprocess
import time

from .checks import stamped_blocks
from .events import nbd_base
from .common import BLOCKS, FULL_BLOCKS, MIB, Failed


def make_qcow2(image, base):
    """A qcow2 image made by qemu-img (never by vbmq) over a raw base of stamped blocks: the
    disk's reads of unwritten clusters go through its backing file."""
    with open(base, "wb") as f:
        f.write(stamped_blocks(BLOCKS))
    made = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw",
                           image, str(BLOCKS * 4096)], capture_output=True, text=True)
    if made.returncode != 0:
        raise Failed(f"qemu-img create: {made.stderr.strip()}")


def qcow2_check(image):
    """`qemu-img check` of a disk no vbmq serves: its exit status, and what is wrong or None.
    Leaked clusters (exit 3) are allowed, as QEMU allows them after a crash; corruption (2) or
    an error is not.
    A killed vbmq's rings release the image's lock a little after it is reaped: wait for that."""
    deadline = time.monotonic() + 60
    while True:
        run = subprocess.run(["qemu-img", "check", image], capture_output=True, text=True)
        if "Failed to lock" not in run.stderr or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if run.returncode in (0, 3):
        return run.returncode, None
    return run.returncode, (f"qemu-img check exit {run.returncode}: "
                            f"{(run.stdout + run.stderr).strip()[-400:]}")


class World:
    """Mixed into Thrash: `self.disks` (name -> spec) and `self.blocks` (name -> blocks)."""

    def sock(self, name):
        return os.path.join(self.dir, "s", f"{name}.sock")

    def path(self, name):
        return os.path.join(self.dir, name)

    def setup(self):
        os.makedirs(self.path("s"))
        os.makedirs(self.path("shares/one"))
        # The share the host moves a directory out of (events/shares.py), and beside it, beneath
        # the same --fs-root (so that Landlock does not stand in for the share's own wall), what
        # must not change.
        os.makedirs(self.path("shares/two/moving"))
        os.makedirs(self.path("shares/outside"))
        with open(self.path("shares/outside/canary"), "w") as f:
            f.write("outside the share\n")
        os.makedirs(self.path("snap"))
        for name, mib in (("guest.img", 32), ("plain.img", 8), ("crypt.img", 8),
                          ("track.img", 8), ("extra.img", 8)):
            with open(self.path(name), "wb") as f:
                f.truncate(mib * MIB)
        with open(self.path("base.img"), "wb") as f:
            f.write(stamped_blocks(BLOCKS))  # the thin disk starts as its base; resizes grow it
        make_qcow2(self.path("qcow2.img"), self.path("qcow2-base.img"))
        with open(self.path("key"), "wb") as f:
            f.write(self.rng.randbytes(64))
        os.chmod(self.path("key"), 0o600)
        full_dir = self.host.small_fs()
        dm = self.host.dm_device(BLOCKS * 4096 // MIB)
        self.disks = {
            "plain": f"path={self.path('plain.img')},cache=4M",
            "thin": f"path={self.path('thin.img')},base={self.path('base.img')}",
            "crypt": f"path={self.path('crypt.img')},encrypt=aes-xts,key-file={self.path('key')}",
            "track": f"path={self.path('track.img')},track-changes=on,track-block=4K",
            "full": f"path={full_dir}/full.img",
            "qcow2": f"path={self.path('qcow2.img')},format=qcow2",
            "nbdbase": nbd_base.spec(self),
        }
        if dm:
            self.disks["dm"] = f"path={dm}"
        slow = self.slow_device.make(BLOCKS * 4096 // MIB)
        if slow:
            self.disks["slow"] = f"path={slow}"
        # The full disk is large beside its file system, so that its writes keep allocating.
        self.blocks = {name: BLOCKS for name in self.disks}
        self.blocks["full"] = FULL_BLOCKS
        with open(f"{full_dir}/full.img", "wb") as f:
            f.truncate(FULL_BLOCKS * 4096)
        self.write_config()

    def disk_line(self, name, extra=""):
        inflight = "" if self.inflight else ",inflight=off"
        return f"socket={self.sock(name)},queues=1,{self.disks[name]}{inflight}{extra}"

    def write_config(self):
        lines = [self.disk_line(n) for n in self.disks]
        # Every 8th completion of the guest's disk held 0.3 s: a kill finds requests in flight
        # behind completed ones, which the next vbmq must resubmit (docs/design.md).
        # Two sockets on the guest's image, `handover=on`: its QEMU on one, the destination of
        # its live migration on the other (events/migrate.py), and back.
        for guest in ("guest", "guest-b"):
            lines.append(f"socket={self.sock(guest)},queues=1,path={self.path('guest.img')},"
                         f"delay-us=300000,delay-every=8,handover=on"
                         + ("" if self.inflight else ",inflight=off"))
        if self.limits:
            lines[0] += f",iops={self.limits}"
        os.makedirs(self.path("etc"), exist_ok=True)
        body = "disk = [\n" + "".join(f"  {json.dumps(line)},\n" for line in lines) + "]\n"
        body += f"fs-root = [{json.dumps(self.path('shares'))}]\n"
        two = f"socket={self.sock('two')},dir={self.path('shares/two')},tag=two"
        body += f"fs = [{json.dumps(two)}]\n"
        body += f"control = {json.dumps(self.sock('ctl'))}\n"
        tmp = self.path("etc/vbmq.toml.tmp")
        with open(tmp, "w") as f:
            f.write(body)
        os.rename(tmp, self.path("etc/vbmq.toml"))
