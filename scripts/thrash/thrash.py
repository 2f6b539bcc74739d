"""The thrasher (issue 37): random life events and host faults under verifying load.

Starts a confined `vbmq serve` (control socket, --state, --config, --fs-root) serving a disk of
each kind, a Linux guest (QEMU, TCG) writing and verifying generation stamps on one of them, and
the libblkio client (crates/vbmq-bench/examples/thrash_client.rs) on the others; then, for
--minutes, inflicts one event at a time at random instants while host faults stay on across
others. Every choice comes from one PRNG seeded by --seed. docs/thrash.md says what is checked.
Run it through scripts/thrash.sh, which builds the binaries first.

The parts: world.py (the disks, shares and config), vbmq.py (process control), load.py (the
writers and their lines), share_load.py (the share's client), checks.py (the ledger and the
oracle), events/ (the table of events), report.py (the summary).
"""

import os
import random
import shutil
import signal
import threading
import time

from . import events, host
from .checks import Ledger
from .common import VBMQ, Failed, log
from .load import Load
from .report import Report
from .share_load import ShareLoad
from .slow import SlowDevice
from .vbmq import VbmqControl
from .world import World


class Thrash(World, VbmqControl, Load, ShareLoad, Report):
    def __init__(self, args):
        self.rng = random.Random(args.seed)
        self.seed = args.seed
        self.minutes = args.minutes
        self.inflight = args.inflight
        self.only = args.only
        self.dir = f"/tmp/vbmq-thrash-{os.getpid()}"
        self.lock = threading.Lock()
        self.errors = []
        self.ledger = Ledger()
        self.events = []  # (kind, start, end)
        self.counts = {}
        self.vbmq = None
        self.binary = VBMQ  # the build `vbmq serve` runs (events/upgrade.py changes it)
        self.runs = 0
        self.qcow2_status = None  # qemu-img check's exit status at the last stop of vbmq
        self.mirrors = 0  # starts of a mirror's destination vbmq
        self.client = None
        self.qemu = None
        self.host = host.Host(self.dir, log)
        self.slow_device = SlowDevice(self.dir, log)  # the loop device vbmq's cgroup throttles
        self.slowed = None  # (time, rounds of its writer) when it was slowed
        self.faulted = {}  # writer -> fault start time (its IOERRs and pauses are expected)
        self.fault_windows = []  # (writer, start, end) of each fault cleared
        self.kills_since_checkpoint = 0
        self.checkpoint = None
        self.share_added = False
        self.extra_added = False
        self.limits = 0
        self.samples = []  # (time, rss KiB, fds, threads)
        self.synced = threading.Condition()
        self.sync_sent = self.sync_seen = 0
        self.stopping = False
        self.rebooting = False
        self.moved_out = None  # the outside's tree while a share's directory is out of it
        self.share_client = None
        self.base_server = None  # the nbdbase disk's qemu-nbd (events/nbd_base.py)
        self.back = 0  # run-time disks a mirror-migrate came back on (events/mirror_migrate.py)

    def error(self, what):
        with self.lock:
            self.errors.append(what)
        log(f"ERROR: {what}")

    def run_events(self):
        kinds = events.kinds(self.disks, self.only)
        if not kinds:
            raise Failed(f"no event kind to run: --only {','.join(self.only)} needs disks "
                         "this host cannot make (see above)")
        first = kinds[:]
        self.rng.shuffle(first)  # every kind once, early, then at random by weight
        weights = [events.EVENTS[k][1] for k in kinds]
        start = time.monotonic()
        end = start + self.minutes * 60
        sampled = 0  # minutes of events sampled
        while time.monotonic() < end:
            gap = self.rng.uniform(1.0, 5.0)
            until = time.monotonic() + gap
            while time.monotonic() < until:
                self.check_alive()
                events.shares.check_outside(self)
                time.sleep(0.1)
            if time.monotonic() - start > 60 * (sampled + 1):
                self.sample()  # each minute, the first one in: the growth is bounded
                sampled += 1
            kind = first.pop() if first else self.rng.choices(kinds, weights)[0]
            began = time.monotonic()
            log(f"event {kind}")
            events.EVENTS[kind][0](self)
            self.events.append((kind, began, time.monotonic()))
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.check_alive()
        if not sampled:
            self.sample()

    def run(self):
        self.setup()
        self.start_vbmq()
        self.start_load()
        self.start_share_load()
        log("waiting for every writer's first flushed round (the guest boots under TCG)")
        self.wait_writers(300)
        log(f"load running; events for {self.minutes} min, seed {self.seed}")
        self.run_events()
        events.faults.clear_all(self)
        events.shares.clear(self)
        self.sample()
        self.check_alive()
        self.stopping = True
        self.client.stdin.close()
        self.share_client.stdin.close()
        status = self.client.wait(timeout=300)
        if status != 0:
            self.error(f"the libblkio client's final read-back failed: exit {status}")
        self.stop_vbmq(signal.SIGTERM)

    def cleanup(self):
        self.stopping = True
        for proc in (self.client, self.share_client, self.vbmq):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.qemu is not None:
            self.qemu.stop()
        if self.base_server is not None:
            self.base_server.kill()
        self.slow_device.cleanup()
        self.host.cleanup()
        if not self.errors:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            log(f"kept {self.dir} (vbmq-N.log, console.log) for the errors above")
