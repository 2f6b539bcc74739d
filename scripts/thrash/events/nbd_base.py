"""A disk whose base is an NBD export (`base=nbd+unix:`), fetched while written: the `nbdbase`
disk (world.py) reads the blocks it lacks from `qemu-nbd` serving a read-only image of stamped
blocks (generation 0), twice the writer's range, so that the upper half is only ever read
through. The event kills the server (`kill -9`, by its PID) under the writer, starts it again
on the same socket after a random pause, then takes a `snapshot` of the disk, which reads every
block the disk lacks from the new server while the writer goes on. Checked: no request of the
writer failed (the fetches waited for the server, within `base-timeout=`); the snapshot's lower
half holds what the writer may have left there (the snapshot's check), its upper half exactly
the base's bytes."""

import os
import subprocess
import time

from .. import host
from ..checks import BLOCK, check_snapshot, stamped_blocks
from ..common import BLOCKS, Failed, broken, log

# The disk and its base: the writer's BLOCKS, then as many only read through.
BASE_BLOCKS = 2 * BLOCKS


def spec(t):
    """The `nbdbase` disk's spec, its base's server started."""
    with open(t.path("nbd-base.img"), "wb") as f:
        f.write(stamped_blocks(BASE_BLOCKS))
    t.base_server = BaseServer(t.path("nbd-base.img"), t.path("s/base.nbd"))
    t.base_server.start()
    return (f"path={t.path('nbdbase.img')},base=nbd+unix:///base?socket={t.base_server.socket},"
            f"base-block=16K,base-timeout=20")


def nbd_base(t):
    t.base_server.kill()
    time.sleep(t.rng.uniform(0.1, 3.0))  # the base away for a while, under the writer
    if broken("nbd-base"):  # the server never started again: the fetches must fail
        log("nbd-base: the base's server left stopped")
    else:
        t.base_server.start()
    snap = t.path("snap/nbdbase.raw")
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map("nbdbase")
    taken = t.ctl("snapshot", t.sock("nbdbase"), snap, "--force", timeout=300)
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map("nbdbase")
    if taken is None:
        if broken("nbd-base"):
            t.base_server.start()  # for the rest of the run
        return
    bad = check_snapshot(snap, BLOCKS, low, high) or upper_half(snap)
    os.unlink(snap)
    if bad:
        t.error(f"nbd-base: the snapshot's {bad}")
    else:
        log(f"nbd-base: the base's server restarted, the snapshot read it through: "
            f"{len(high)} written blocks as due, the rest the base's")


def upper_half(path):
    """What is wrong with the blocks no one writes (they must be the base's), or None."""
    with open(path, "rb") as f:
        f.seek(BLOCKS * BLOCK)
        data = f.read()
    want = stamped_blocks(BASE_BLOCKS)[BLOCKS * BLOCK:]
    if data != want:
        first = next((i for i in range(0, min(len(data), len(want)), BLOCK)
                      if data[i:i + BLOCK] != want[i:i + BLOCK]), min(len(data), len(want)))
        return f"block {BLOCKS + first // BLOCK} is not the base's ({len(data)} bytes read)"
    return None


class BaseServer:
    """`qemu-nbd` serving `image` read-only as `base` on `socket`, several clients at once."""

    def __init__(self, image, socket):
        self.image = image
        self.socket = socket
        self.proc = None

    def start(self):
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass
        self.proc = subprocess.Popen(
            ["qemu-nbd", "--persistent", "--shared=8", "--format=raw", "--read-only",
             "--export-name=base", f"--socket={self.socket}", self.image],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=host.die_with_parent)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failed(f"qemu-nbd did not start: {self.proc.poll()} "
                             f"{self.proc.stderr.read().decode(errors='replace')[-300:]}")
            time.sleep(0.02)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
