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
# VBMQ_THRASH_BREAK=KIND: that event skips a step or corrupts what it checks, on purpose (a
# mutation check: the run must fail; docs/thrash.md lists what each kind's break does).
BREAK = os.environ.get("VBMQ_THRASH_BREAK")


def log(msg):
    print(f"thrash: [{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def broken(kind):
    """Whether this run breaks `kind` on purpose (VBMQ_THRASH_BREAK); says so when it does."""
    if BREAK == kind:
        log(f"BREAK {kind}: broken on purpose (VBMQ_THRASH_BREAK)")
        return True
    return False


class Failed(Exception):
    pass
