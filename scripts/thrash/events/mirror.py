"""A mirror to a second vbmq under the writers' load: the destination (its own process, image
and control socket) exports its disk writable, the thrashed vbmq mirrors a disk to it with
`--wait-ready`, then `mirror-end`. The destination's image then holds every block at least as
flushed before mirror-end, at most as written by its reply (the snapshot's check)."""

import json
import os
import shutil
import signal
import subprocess
import time

from .. import host
from ..checks import check_snapshot
from ..common import BLOCKS, VBMQ, log

# `path=` disks a mirror copies (their size is read from `list`: resizes grow thin).
DISKS = ["plain", "thin", "track"]


def mirror(t):
    name = t.rng.choice(DISKS)
    listing = json.loads(t.ctl("list").stdout)
    size = next(d["size"] for d in listing if d.get("socket") == t.sock(name))
    destination = Destination(t, size)
    try:
        if destination.start():
            copy(t, name, destination)
    finally:
        destination.stop()
        shutil.rmtree(destination.dir, ignore_errors=True)


def copy(t, name, destination):
    if t.mirrors % 2 == 0:
        # Every second mirror, vbmq killed mid-copy: the mirror dies with it (mirrors are not
        # in --state), which is no error; the writers' read-back after the restart is the
        # check, as for `kill`.
        if t.ctl("mirror-begin", t.sock(name), destination.uri()) is not None:
            t.stop_vbmq(signal.SIGKILL)
            t.start_vbmq()
            log(f"mirror of {name}: vbmq killed mid-copy and started again")
        return
    began = t.ctl("mirror-begin", t.sock(name), destination.uri(), "--wait-ready",
                  timeout=300)
    if began is None:
        return
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map(name)
    ended = t.ctl("mirror-end", t.sock(name))
    if ended is None:
        return
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map(name)
    state = json.loads(ended.stdout).get("state")
    if state != "ready":
        t.error(f"mirror of {name} ended {state}: {ended.stdout.strip()[:300]}")
        return
    if not destination.finish():
        return
    bad = check_snapshot(destination.image, BLOCKS, low, high)
    if bad:
        t.error(f"mirror of {name}: the destination's {bad}")
    else:
        log(f"mirror of {name}: ready, ended, {len(high)} written blocks as due on the "
            f"destination")


class Destination:
    """A second `vbmq serve` in `mirror/`, its disk exported writable on `dst.nbd`."""

    def __init__(self, t, size):
        self.t = t
        self.dir = t.path("mirror")
        self.image = os.path.join(self.dir, "dst.img")
        self.socket = os.path.join(self.dir, "dst.sock")
        self.control = os.path.join(self.dir, "ctl.sock")
        self.export = os.path.join(self.dir, "dst.nbd")
        self.size = size
        self.proc = None

    def uri(self):
        return f"nbd+unix:///?socket={self.export}"

    def ctl(self, *args, quiet=False):
        try:
            run = subprocess.run([VBMQ, "ctl", "--control", self.control, *args],
                                 capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            self.t.error(f"the destination's vbmq ctl {' '.join(args)}: no answer in 120 s")
            return False
        if run.returncode != 0 and not quiet:
            self.t.error(f"the destination's vbmq ctl {' '.join(args)}: "
                         f"exit {run.returncode}: {run.stderr.strip()}")
        return run.returncode == 0

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(self.size)
        self.t.mirrors += 1
        logfile = open(self.t.path(f"mirror-{self.t.mirrors}.log"), "wb")
        self.proc = subprocess.Popen(
            [VBMQ, "serve", "--disk", f"socket={self.socket},path={self.image}",
             "--control", self.control],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "info"}, preexec_fn=host.die_with_parent)
        logfile.close()
        deadline = time.monotonic() + 120
        while not (os.path.exists(self.control) and self.ctl("list", quiet=True)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.t.error(f"the mirror's destination did not start: {self.proc.poll()}")
                return False
            time.sleep(0.05)
        return self.ctl("export-begin", self.socket, f"unix:{self.export}", "--writable")

    def finish(self):
        """Ends the export and the process (SIGTERM, by its PID): the image is then whole."""
        ok = self.ctl("export-end", self.socket, f"unix:{self.export}")
        status = self.stop()
        if status != 0:
            self.t.error(f"the mirror's destination exited {status} on SIGTERM")
        return ok and status == 0

    def stop(self):
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
        return status
