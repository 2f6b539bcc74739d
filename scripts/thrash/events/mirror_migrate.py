"""Live migration without shared storage, there and back, under the guest's writers, as
libvirt's `--copy-storage-all` does (tests/guest_mirror_migrate.rs does it once on a quiet
system).

Out: a second `vbmq serve` (mirror.py's `Destination`: its own image and control socket)
exports an empty image writable; the thrashed vbmq mirrors the guest's disk into it
(`mirror-begin --wait-ready`); a QEMU on the second vbmq's disk, started with `-incoming` and
`-S`, receives the guest by QMP `migrate`; once it completes (the source's rings stopped),
`mirror-end` must say `ready`, then the destination runs (`cont`) and is the guest.
Back: a run-time `handover=on` disk on the guest's image in the thrashed vbmq (a new one each
time: a writable export needs a disk no guest has started on) exports it writable, the second
vbmq mirrors into it, and the guest migrates back the same way; the second vbmq then stops.
After each hop, every block of the image the guest now runs on holds its writer's last flushed
generation or a later one (guest.py's check); the writers go on without a verify error."""

import json
import os
import shutil
import subprocess
import time

from ..common import GUEST_WRITERS, VBMQ, broken, log
from .guest import check_image
from .migrate import DOWNTIME_MS, wait_completed, wait_state
from .mirror import Destination

WRITERS = [f"guest{i}" for i in range(GUEST_WRITERS)]


def mirror_migrate(t):
    drop_idle_back_disks(t)
    listing = json.loads(t.ctl("list").stdout)
    size = next(d["size"] for d in listing if d.get("socket") == t.qemu.socket)
    away = Destination(t, size)
    began = time.monotonic()
    try:
        if not away.start():
            return
        out = Hop(t, t.ctl, t.qemu.socket, away.socket, away.uri(), away.image)
        if not out.run("out"):
            return
        t.back += 1
        back = t.sock(f"back{t.back}")
        export = t.path(f"s/back{t.back}.nbd")
        if t.ctl("add-disk", f"socket={back},path={t.path('guest.img')},handover=on") is None:
            return
        if t.ctl("export-begin", back, f"unix:{export}", "--writable") is None:
            return
        home = Hop(t, lambda *a, **k: away_ctl(t, away, *a, **k), away.socket, back,
                   f"nbd+unix:///?socket={export}", t.path("guest.img"))
        if home.run("back"):
            log(f"mirror-migrate: out to a second vbmq and back on {os.path.basename(back)} "
                f"in {time.monotonic() - began:.1f} s")
    finally:
        away.stop()
        shutil.rmtree(away.dir, ignore_errors=True)


class Hop:
    """One migration of the guest from the disk `source` to the disk `target` of another vbmq,
    its image mirrored by the source's vbmq (`ctl`) to the target's writable export at `uri`."""

    def __init__(self, t, ctl, source, target, uri, image):
        self.t, self.ctl, self.source, self.target = t, ctl, source, target
        self.uri, self.image = uri, image

    def run(self, what):
        t = self.t
        began = time.monotonic()
        # The break: no mirror at all; the destination's image is left empty.
        mirrored = not broken("mirror-migrate")
        if mirrored and self.ctl("mirror-begin", self.source, self.uri, "--wait-ready",
                                 timeout=600) is None:
            return False
        incoming = os.path.join(t.dir, f"migrate-{t.qemu.starts + 1}.sock")
        proc, qmp_socket, stderr = t.qemu.start(self.target, incoming, paused=True)
        try:
            if not wait_state(t, t.qemu, qmp_socket, proc, "inmigrate", began):
                return False
            t.qemu.qmp("migrate-set-parameters", **{"downtime-limit": DOWNTIME_MS,
                                                      "max-bandwidth": 1 << 30})
            t.qemu.qmp("migrate", uri=f"unix:{incoming}")
            info = wait_completed(t, t.qemu, began)
            if info is None or (mirrored and not self.end_mirror(what)):
                return False
            if not wait_state(t, t.qemu, qmp_socket, proc, "paused", began):
                return False
            t.qemu.qmp("cont", qmp_socket=qmp_socket)
            if not wait_state(t, t.qemu, qmp_socket, proc, "running", began):
                return False
            t.qemu.take_over(proc, qmp_socket, stderr, self.target)
            proc = None
            log(f"mirror-migrate {what}: on {os.path.basename(self.target)} in "
                f"{time.monotonic() - began:.1f} s (downtime {info.get('downtime', 0)} ms)")
            return check_image(t, WRITERS, f"mirror-migrate {what}", image=self.image)
        finally:
            if proc is not None:  # the destination of a migration that failed
                proc.kill()
                proc.wait()
                stderr.close()

    def end_mirror(self, what):
        """`mirror-end` once the source's rings have stopped: it must say `ready`."""
        ended = self.ctl("mirror-end", self.source)
        if ended is None:
            return False
        state = json.loads(ended.stdout).get("state")
        if state != "ready":
            self.t.error(f"mirror-migrate {what}: the mirror ended {state}: "
                         f"{ended.stdout.strip()[:300]}")
            return False
        return True


def away_ctl(t, away, *args, timeout=120):
    """`vbmq ctl` of the second vbmq: its answer, or None (an error) if it failed."""
    try:
        run = subprocess.run([VBMQ, "ctl", "--control", away.control, *args],
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        t.error(f"the second vbmq's ctl {' '.join(args)}: no answer in {timeout} s")
        return None
    if run.returncode != 0:
        t.error(f"the second vbmq's ctl {' '.join(args)}: exit {run.returncode}: "
                f"{run.stderr.strip()}")
        return None
    return run


def drop_idle_back_disks(t):
    """Removes the disks earlier mirror-migrates came back on that the guest has left."""
    listing = json.loads(t.ctl("list").stdout)
    for disk in listing:
        socket = disk.get("socket", "")
        if os.path.basename(socket).startswith("back") and socket != t.qemu.socket:
            t.ctl("remove-disk", socket)
