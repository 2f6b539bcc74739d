"""What every part of the thrasher shares: where the binaries are, sizes, the log line."""

import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# VBMQ_THRASH_BIN: another build of vbmq (a copy kept while the tree builds a mutant).
VBMQ = os.environ.get("VBMQ_THRASH_BIN") or os.path.join(ROOT, "target/release/vbmq")
CLIENT = os.path.join(ROOT, "target/release/examples/thrash_client")
SHARE_CLIENT = os.path.join(ROOT, "target/release/examples/thrash_share_client")
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
