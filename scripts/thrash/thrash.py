#!/usr/bin/env python3
"""The thrasher (issue 37): random life events and host faults under verifying load.

Starts a confined `vbmq serve` (control socket, --state, --config, --fs-root) serving a disk of
each kind, a Linux guest (QEMU, TCG) writing and verifying generation stamps on one of them, and
the libblkio client (crates/vbmq-bench/examples/thrash_client.rs) on the others; then, for
--minutes, inflicts one event at a time at random instants while host faults stay on across
others. Every choice comes from one PRNG seeded by --seed. docs/thrash.md says what is checked.
Run it through scripts/thrash.sh, which builds the binaries first.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

from . import host
from .checks import Ledger, check_snapshot, differing_blocks, stamped_blocks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VBMQ = os.path.join(ROOT, "target/release/vbmq")
CLIENT = os.path.join(ROOT, "target/release/examples/thrash_client")
BLOCKS = 2048  # 8 MiB of stamps per client disk: a full read-back after a restart stays short
FULL_BLOCKS = 16384  # 64 MiB on a 96 MiB file system
GUEST_BLOCKS = 4096
GUEST_WRITERS = 4  # scripts/thrash/guest_writer.c's WRITERS
STALL = 60.0  # a writer with no flushed round for this long (outside its fault) is hung
MIB = 1 << 20


def log(msg):
    print(f"thrash: [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Failed(Exception):
    pass


class Thrash:
    def __init__(self, args):
        self.rng = random.Random(args.seed)
        self.seed = args.seed
        self.minutes = args.minutes
        self.inflight = args.inflight
        self.dir = f"/tmp/vbmq-thrash-{os.getpid()}"
        self.lock = threading.Lock()
        self.errors = []
        self.ledger = Ledger()
        self.events = []  # (kind, start, end)
        self.counts = {}
        self.vbmq = None
        self.runs = 0
        self.client = None
        self.qemu = None
        self.host = host.Host(self.dir, log)
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

    # -- errors ------------------------------------------------------------------------------

    def error(self, what):
        with self.lock:
            self.errors.append(what)
        log(f"ERROR: {what}")

    def sock(self, name):
        return os.path.join(self.dir, "s", f"{name}.sock")

    def path(self, name):
        return os.path.join(self.dir, name)

    # -- set-up ------------------------------------------------------------------------------

    def setup(self):
        os.makedirs(self.path("s"))
        os.makedirs(self.path("shares/one"))
        os.makedirs(self.path("snap"))
        for name, mib in (("guest.img", 32), ("plain.img", 8), ("crypt.img", 8),
                          ("track.img", 8), ("extra.img", 8)):
            with open(self.path(name), "wb") as f:
                f.truncate(mib * MIB)
        with open(self.path("base.img"), "wb") as f:
            f.write(stamped_blocks(BLOCKS))  # the thin disk starts as its base; resizes grow it
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
        }
        if dm:
            self.disks["dm"] = f"path={dm}"
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
        lines.append(f"socket={self.sock('guest')},queues=1,path={self.path('guest.img')},"
                     f"delay-us=300000,delay-every=8" + ("" if self.inflight else ",inflight=off"))
        if self.limits:
            lines[0] += f",iops={self.limits}"
        os.makedirs(self.path("etc"), exist_ok=True)
        body = "disk = [\n" + "".join(f"  {json.dumps(line)},\n" for line in lines) + "]\n"
        body += f"fs-root = [{json.dumps(self.path('shares'))}]\n"
        body += f"control = {json.dumps(self.sock('ctl'))}\n"
        tmp = self.path("etc/vbmq.toml.tmp")
        with open(tmp, "w") as f:
            f.write(body)
        os.rename(tmp, self.path("etc/vbmq.toml"))

    # -- vbmq --------------------------------------------------------------------------------

    def ctl(self, *args, ok=True, timeout=120):
        cmd = [VBMQ, "ctl", "--control", self.sock("ctl"), "--state", self.path("state.toml"),
               *args]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.error(f"vbmq ctl {' '.join(args)}: no answer in {timeout} s")
            return None
        if ok and run.returncode != 0:
            self.error(f"vbmq ctl {' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
            return None
        return run

    def start_vbmq(self):
        self.runs += 1
        logfile = open(self.path(f"vbmq-{self.runs}.log"), "wb")
        try:
            os.unlink(self.sock("ctl"))  # a killed process leaves it behind
        except FileNotFoundError:
            pass
        self.vbmq = subprocess.Popen(
            [VBMQ, "serve", "--config", self.path("etc/vbmq.toml"),
             "--state", self.path("state.toml")],
            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "info"}, preexec_fn=host.die_with_parent)
        logfile.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.vbmq.poll() is not None:
                raise Failed(f"vbmq exited at start: {self.vbmq.returncode} "
                             f"(see {self.path(f'vbmq-{self.runs}.log')})")
            if os.path.exists(self.sock("ctl")):
                run = self.ctl("list", ok=False, timeout=30)
                if run is not None and run.returncode == 0:
                    break
            time.sleep(0.05)
        else:
            raise Failed("vbmq did not answer on its control socket within 120 s")
        if self.share_added:
            self.add_share()

    def stop_vbmq(self, sig):
        self.vbmq.send_signal(sig)
        try:
            status = self.vbmq.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.error(f"vbmq did not exit within 120 s of signal {sig}")
            self.vbmq.kill()
            status = self.vbmq.wait()
        if sig == signal.SIGTERM and status != 0:
            self.error(f"vbmq exited {status} on SIGTERM")
        if self.checkpoint and sig == signal.SIGKILL:
            self.kills_since_checkpoint += 1

    def add_share(self):
        spec = f"socket={self.sock('share')},dir={self.path('shares/one')},tag=one"
        self.ctl("add-fs", spec)

    def sample(self):
        pid = self.vbmq.pid
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
            rss = int(status["VmRSS"].split()[0])
            threads = int(status["Threads"])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except (OSError, KeyError, ValueError):
            return
        self.samples.append((time.monotonic(), rss, fds, threads))

    # -- load --------------------------------------------------------------------------------

    def start_load(self):
        targets = [f"{n}={self.sock(n)}:{self.blocks[n]}" for n in self.disks]
        self.client = subprocess.Popen([CLIENT, str(self.seed), *targets],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       preexec_fn=host.die_with_parent)
        threading.Thread(target=self.read_client, daemon=True).start()
        self.qemu = host.Guest(self.dir, self.sock("guest"), GUEST_BLOCKS, self.seed, ROOT)
        threading.Thread(target=self.read_guest, daemon=True).start()

    def sync_client(self):
        """Returns once every line the client printed before now is in the ledger (a writer
        prints a round's blocks before it submits them, so that is every write submitted)."""
        with self.synced:
            self.sync_sent += 1
            wanted = self.sync_sent
            self.client.stdin.write(f"SYNC {wanted}\n")
            self.client.stdin.flush()
            if not self.synced.wait_for(lambda: self.sync_seen >= wanted, timeout=120):
                raise Failed("the libblkio client did not answer SYNC within 120 s")

    def read_client(self):
        for line in self.client.stdout:
            words = line.split()
            if words[:1] == ["SYNC"] and len(words) == 2:
                with self.synced:
                    self.sync_seen = int(words[1])
                    self.synced.notify_all()
                continue
            self.on_line(words)
        if not self.stopping:
            self.error(f"the libblkio client exited: {self.client.wait()}")

    def read_guest(self):
        for line in self.qemu.lines(lambda: self.stopping):
            words = line.split()
            kind = {"G": "F", "GE": "E", "GV": "V"}.get(words[0]) if words else None
            if kind in ("F", "E") and len(words) >= 3:
                self.on_line([kind, f"guest{words[-1]}", *words[1:-1]])
            elif kind == "V":
                self.on_line([kind, "guest", *words[1:]])
            elif "VBMQ-GUEST-EXIT" in line or "Kernel panic" in line or "I/O error" in line:
                self.error(f"guest: {line.strip()}")
        if not self.stopping:
            self.error("the guest stopped: " + self.qemu.tail())

    def on_line(self, words):
        if len(words) < 2:
            return
        kind, name = words[0], words[1]
        now = time.monotonic()
        with self.lock:
            if kind == "W" and len(words) == 4:
                self.ledger.written(name, int(words[2]), [int(b) for b in words[3].split(",")])
            elif kind == "F":
                self.ledger.flushed(name, int(words[2]), now)
            elif kind == "E":
                self.ledger.failed(name, now)
                if name not in self.faulted:
                    self.errors.append(f"{name}: a request failed outside a fault: {words}")
            elif kind == "V":
                self.errors.append(f"{name}: lost write: {' '.join(words[2:])}")
            elif kind == "D":
                self.ledger.disconnected(name, now)
        if kind in ("E", "V") and (kind == "V" or name not in self.faulted):
            log(f"ERROR: {' '.join(words)}")

    def writers(self):
        """The libblkio client's threads (one per disk), then the guest's writer processes."""
        return list(self.disks) + [f"guest{i}" for i in range(GUEST_WRITERS)]

    def wait_writers(self, timeout):
        deadline = time.monotonic() + timeout
        names = self.writers()
        while time.monotonic() < deadline:
            if all(self.ledger.rounds(n) > 0 for n in names):
                return
            self.check_alive()
            time.sleep(0.2)
        missing = [n for n in names if self.ledger.rounds(n) == 0]
        raise Failed(f"no flushed round within {timeout} s from {missing}")

    def check_alive(self):
        if self.vbmq.poll() is not None:
            self.error(f"vbmq exited by itself: {self.vbmq.returncode}")
            raise Failed("vbmq exited")
        now = time.monotonic()
        for name in self.writers():
            last = self.ledger.last_progress(name)
            # A faulted disk's writer waits for its fault; once cleared, after_fault waits for it.
            if name not in self.faulted and last and now - last > STALL:
                self.error(f"{name}: no flushed round for {now - last:.0f} s")
                raise Failed("stall")
        if self.errors:
            raise Failed(self.errors[0])

    # -- events ------------------------------------------------------------------------------

    def event_kill(self):
        self.stop_vbmq(signal.SIGKILL)
        self.start_vbmq()

    def event_term(self):
        self.stop_vbmq(signal.SIGTERM)
        self.start_vbmq()

    def event_resize(self):
        name = self.rng.choice(["guest", "thin"])
        listing = json.loads(self.ctl("list").stdout)
        size = next(d["size"] for d in listing if d.get("socket") == self.sock(name))
        self.ctl("resize", self.sock(name), str(size + MIB))

    def event_add_remove_disk(self):
        if self.extra_added:
            self.ctl("remove-disk", self.sock("extra"))
        else:
            self.ctl("add-disk", f"socket={self.sock('extra')},path={self.path('extra.img')}")
        self.extra_added = not self.extra_added

    def event_add_remove_share(self):
        if self.share_added:
            self.ctl("remove-fs", self.sock("share"))
        else:
            self.add_share()
        self.share_added = not self.share_added

    def event_reload(self):
        self.limits = self.rng.choice([0, 2000, 50000])
        self.write_config()
        replace = self.rng.random() < 0.3
        self.ctl("reload", *(["--replace"] if replace else []))

    def event_snapshot(self):
        name = self.rng.choice(["plain", "track"])
        target = self.path(f"snap/{name}.raw")
        self.sync_client()
        with self.lock:
            low = self.ledger.flushed_map(name)
        if self.ctl("snapshot", self.sock(name), target, "--force") is None:
            return
        self.sync_client()
        with self.lock:
            high = self.ledger.written_map(name)
        bad = check_snapshot(target, BLOCKS, low, high)
        if bad:
            self.error(f"snapshot of {name}: {bad}")
        else:
            log(f"snapshot of {name}: {len(high)} written blocks as due")
        os.unlink(target)

    def event_checkpoint(self):
        """Begins map N with a snapshot, then checks changed-blocks against it: after a few
        seconds of writes, or one time in four at the next checkpoint event, other events
        (kills: the map must then be refused) between."""
        if self.checkpoint is None:
            self.begin_checkpoint()
            if self.checkpoint is None or self.rng.random() < 0.25:
                return
            until = time.monotonic() + self.rng.uniform(1.0, 3.0)
            while time.monotonic() < until:
                self.check_alive()
                time.sleep(0.1)
        self.check_checkpoint()

    def begin_checkpoint(self):
        name = f"cp{len(self.events)}"
        first = self.path("snap/first.raw")
        self.sync_client()
        with self.lock:
            low = self.ledger.flushed_map("track")
        if self.ctl("snapshot", self.sock("track"), first, "--force", "--name", name) is None:
            return
        self.sync_client()
        with self.lock:
            high = self.ledger.written_map("track")
        bad = check_snapshot(first, BLOCKS, low, high)
        if bad:
            self.error(f"snapshot --name {name}: {bad}")
        self.checkpoint = name
        self.kills_since_checkpoint = 0

    def check_checkpoint(self):
        """A second snapshot, then changed-blocks: every block that differs between the two
        snapshots was written after the map began, so it must be listed."""
        name, self.checkpoint = self.checkpoint, None
        first, second = self.path("snap/first.raw"), self.path("snap/second.raw")
        if self.ctl("snapshot", self.sock("track"), second, "--force") is None:
            return
        run = self.ctl("changed-blocks", self.sock("track"), "--since", name, ok=False)
        if run is None:
            return
        if self.kills_since_checkpoint:
            # A kill leaves the map file "in use": every map is invalid, by design.
            if run.returncode == 0:
                self.error(f"changed-blocks {name} answered after a kill -9: {run.stdout[:200]}")
            else:
                log(f"changed-blocks {name} refused after a kill -9, as it must")
        elif run.returncode != 0:
            self.error(f"changed-blocks {name}: exit {run.returncode}: {run.stderr.strip()}")
        else:
            listed = set()
            for extent in json.loads(run.stdout)["extents"]:
                start = extent["offset"] // 4096
                listed.update(range(start, start + -(-extent["length"] // 4096)))
            changed = differing_blocks(first, second)
            missing = sorted(changed - listed)
            if missing:
                self.error(f"changed-blocks {name} misses blocks {missing[:10]} "
                           f"({len(missing)} of the {len(changed)} that changed)")
            else:
                log(f"changed-blocks {name}: {len(listed)} blocks listed, "
                    f"the {len(changed)} that changed among them")
        os.unlink(second)
        self.ctl("forget-checkpoint", self.sock("track"), name, ok=False)

    def fault(self, writer, on, off):
        """Toggles a host fault on `writer`'s disk: on now, off the next time."""
        if writer in self.faulted:
            off()
            self.after_fault(writer)
        else:
            self.faulted[writer] = time.monotonic()  # before: its first IOERR may come at once
            on()

    def after_fault(self, writer):
        """The disk serves again: a flushed round within STALL seconds."""
        cleared = time.monotonic()
        rounds = self.ledger.rounds(writer)
        while self.ledger.rounds(writer) <= rounds + 1:
            if time.monotonic() - cleared > STALL:
                self.error(f"{writer}: not serving {STALL:.0f} s after its fault cleared")
                break
            self.check_alive()
            time.sleep(0.1)
        self.fault_windows.append((writer, self.faulted.pop(writer), time.monotonic()))

    def event_fs_full(self):
        self.fault("full", self.host.fill, self.host.unfill)

    def event_dm_error(self):
        if self.host.dm_mode not in ("linear", "error"):
            return self.event_dm_delay()
        self.fault("dm", lambda: self.host.dm_set("error"), lambda: self.host.dm_set("linear"))

    def event_dm_delay(self):
        if self.host.dm_mode not in ("linear", "delay"):
            return self.event_dm_error()
        # A slow device fails nothing: its writer is not excused any error, only the pause.
        if self.host.dm_mode == "delay":
            self.host.dm_set("linear")
        else:
            self.host.dm_set("delay")

    EVENTS = {
        "kill": (event_kill, 3),
        "term": (event_term, 2),
        "resize": (event_resize, 1),
        "disk": (event_add_remove_disk, 1),
        "share": (event_add_remove_share, 1),
        "reload": (event_reload, 1),
        "snapshot": (event_snapshot, 2),
        "checkpoint": (event_checkpoint, 2),
        "fs-full": (event_fs_full, 1),
        "dm-error": (event_dm_error, 1),
        "dm-delay": (event_dm_delay, 1),
    }

    def run_events(self):
        kinds = [k for k in self.EVENTS if "dm" in self.disks or not k.startswith("dm-")]
        first = kinds[:]
        self.rng.shuffle(first)  # every kind once, early, then at random by weight
        weights = [self.EVENTS[k][1] for k in kinds]
        start = time.monotonic()
        end = start + self.minutes * 60
        sampled_first = False
        while time.monotonic() < end:
            gap = self.rng.uniform(1.0, 5.0)
            until = time.monotonic() + gap
            while time.monotonic() < until:
                self.check_alive()
                time.sleep(0.1)
            if not sampled_first and time.monotonic() - start > 60:
                self.sample()
                sampled_first = True
            kind = first.pop() if first else self.rng.choices(kinds, weights)[0]
            began = time.monotonic()
            log(f"event {kind}")
            self.EVENTS[kind][0](self)
            self.events.append((kind, began, time.monotonic()))
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.check_alive()
        if not sampled_first:
            self.sample()

    def clear_faults(self):
        for writer in list(self.faulted):
            {"full": self.host.unfill, "dm": lambda: self.host.dm_set("linear")}[writer]()
            self.after_fault(writer)
        if self.host.dm_mode not in (None, "linear"):
            self.host.dm_set("linear")

    # -- the run -----------------------------------------------------------------------------

    def run(self):
        self.setup()
        self.start_vbmq()
        self.start_load()
        log("waiting for every writer's first flushed round (the guest boots under TCG)")
        self.wait_writers(300)
        log(f"load running; events for {self.minutes} min, seed {self.seed}")
        self.run_events()
        self.clear_faults()
        self.sample()
        self.check_alive()
        self.stopping = True
        self.client.stdin.close()
        status = self.client.wait(timeout=300)
        if status != 0:
            self.error(f"the libblkio client's final read-back failed: exit {status}")
        self.stop_vbmq(signal.SIGTERM)

    def pauses(self):
        """Per event kind, the longest gap between flushed rounds of any writer across it."""
        worst = {}
        for kind, began, ended in self.events:
            for name in self.writers():
                if any(w == name and a <= ended and b >= began for w, a, b in self.fault_windows):
                    continue  # a faulted disk's own pause is its fault's length
                gap = self.ledger.longest_gap(name, began, ended)
                if gap > worst.get(kind, (0.0, ""))[0]:
                    worst[kind] = (gap, name)
        return worst

    def summary(self):
        logs = sum(os.path.getsize(self.path(f"vbmq-{i}.log")) for i in range(1, self.runs + 1))
        if logs > 16 * MIB:
            self.error(f"vbmq logged {logs} bytes in {self.runs} runs")
        pauses = self.pauses()
        for kind in sorted(pauses):
            log(f"worst pause {kind}: {pauses[kind][0]:.1f} s ({pauses[kind][1]})")
        first, last = (self.samples[0], self.samples[-1]) if self.samples else ((0,) * 4,) * 2
        log(f"threads {first[3]}->{last[3]}, logs {logs // 1024} KiB in {self.runs} runs, "
            f"rounds {self.ledger.total_rounds()}")
        counts = " ".join(f"{k}={self.counts[k]}" for k in sorted(self.counts))
        print(f"thrash: {len(self.events)} events ({counts}), {len(self.errors)} errors, "
              f"worst pause {max((p for p, _ in pauses.values()), default=0):.1f} s, "
              f"rss {first[1] // 1024}->{last[1] // 1024} MiB, fds {first[2]}->{last[2]}",
              flush=True)

    def cleanup(self):
        self.stopping = True
        for proc in (self.client, self.vbmq):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.qemu is not None:
            self.qemu.stop()
        self.host.cleanup()
        if not self.errors:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            log(f"kept {self.dir} (vbmq-N.log, console.log) for the errors above")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--inflight", default="on", choices=["on", "off"],
                        help="off: the mutation check (the disks keep no in-flight record)")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = int.from_bytes(os.urandom(4), "little")
    args.inflight = args.inflight == "on"
    log(f"seed {args.seed} (reproduce with --seed {args.seed})")
    thrash = Thrash(args)

    def interrupted(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    try:
        thrash.run()
    except Failed as e:
        if str(e) not in thrash.errors:
            thrash.error(str(e))
    except KeyboardInterrupt:
        thrash.error("interrupted")
    except Exception as e:  # noqa: BLE001 - any driver failure fails the run, cleaned up
        thrash.error(f"{type(e).__name__}: {e}")
        raise
    finally:
        thrash.stopping = True
        try:
            thrash.summary()
        finally:
            thrash.cleanup()
    sys.exit(1 if thrash.errors else 0)
