"""The verifying load: the libblkio client's threads and the guest's writers, whose lines feed
the ledger (checks.py) that every check reads."""

import subprocess
import threading
import time

from . import host
from .common import CLIENT, GUEST_BLOCKS, GUEST_WRITERS, ROOT, STALL, Failed, log


class Load:
    """Mixed into Thrash: `self.client` (libblkio) and `self.qemu` (the guest)."""

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
            elif words[:1] == ["GW"] and len(words) == 4:
                self.on_line(["W", f"guest{words[2]}", words[1], words[3]])
            elif words[:1] == ["GR"] and len(words) == 3:
                self.on_line(["C", f"guest{words[2]}"])
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
                self.ledger.disconnected(name, now, " ".join(words[2:]))
            elif kind == "C":
                self.ledger.connected(name, now)
        if kind in ("E", "V") and (kind == "V" or name not in self.faulted):
            log(f"ERROR: {' '.join(words)}")

    def writers(self):
        """The libblkio client's threads (one per disk), the guest's writer processes, then the
        share's client (its progress: a report every few rounds)."""
        return list(self.disks) + [f"guest{i}" for i in range(GUEST_WRITERS)] + ["share"]

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
            # A rebooting guest's writers wait for its boot; events/guest.py waits for them.
            excused = name in self.faulted or (self.rebooting and name.startswith("guest"))
            # A slow disk's writer may wait longer, never forever (events/faults.py `slow`).
            limit = 4 * STALL if name == "slow" and self.slowed else STALL
            if not excused and last and now - last > limit:
                self.error(f"{name}: no flushed round for {now - last:.0f} s")
                raise Failed("stall")
        if self.errors:
            raise Failed(self.errors[0])
