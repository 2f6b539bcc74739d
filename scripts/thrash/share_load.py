"""The load on a share: thrash_share_client.rs creates files through a directory it holds while
the host moves that directory out of the share and back (events/shares.py)."""

import subprocess
import threading
import time

from . import host
from .common import SHARE_CLIENT, Failed


class ShareLoad:
    """Mixed into Thrash: `self.share_client`, its counts, and its SYNC round trip."""

    def start_share_load(self):
        self.share_client = subprocess.Popen([SHARE_CLIENT, self.sock("two")],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True, preexec_fn=host.die_with_parent)
        self.share_synced = threading.Condition()
        self.share_sync_sent = self.share_sync_seen = 0
        self.share_counts = (0, 0)  # files created, changes refused
        threading.Thread(target=self.read_share_client, daemon=True).start()

    def sync_share(self):
        """Returns once every request the share client began before now is answered."""
        with self.share_synced:
            self.share_sync_sent += 1
            wanted = self.share_sync_sent
            self.share_client.stdin.write(f"SYNC {wanted}\n")
            self.share_client.stdin.flush()
            if not self.share_synced.wait_for(lambda: self.share_sync_seen >= wanted,
                                              timeout=120):
                raise Failed("the share client did not answer SYNC within 120 s")

    def read_share_client(self):
        for line in self.share_client.stdout:
            words = line.split()
            if words[:1] == ["SYNC"] and len(words) == 2:
                with self.share_synced:
                    self.share_sync_seen = int(words[1])
                    self.share_synced.notify_all()
            elif words[:1] == ["S"] and len(words) == 3:
                self.share_counts = (int(words[1]), int(words[2]))
                with self.lock:
                    self.ledger.flushed("share", 0, time.monotonic())
            elif words[:1] == ["SE"]:
                self.error(f"share client: {line.strip()}")
        if not self.stopping:
            self.error(f"the share client exited: {self.share_client.wait()}")
