"""A point-in-time NBD export under write load: `export-begin`, a full read with nbdcopy while
the writers go on, `export-end`. The backup is the disk at the instant of export-begin: each
block holds at least what was flushed before the request and at most what was written by the
reply, as for a snapshot."""

import os
import subprocess

from ..checks import check_snapshot
from ..common import BLOCKS, log

# `path=` disks an export serves (an encrypted disk's is refused: its snapshot layer holds
# ciphertext); the qcow2 disk's is read through its tables, its writer allocating meanwhile.
DISKS = ["plain", "thin", "track", "qcow2"]


def export(t):
    name = t.rng.choice(DISKS)
    address = t.path("s/export.nbd")
    backup = t.path(f"snap/{name}.backup")
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map(name)
    if t.ctl("export-begin", t.sock(name), f"unix:{address}") is None:
        return
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map(name)
    try:
        copy = subprocess.run(["nbdcopy", f"nbd+unix:///?socket={address}", backup],
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        copy = None
    t.ctl("export-end", t.sock(name), f"unix:{address}")
    if copy is None or copy.returncode != 0:
        t.error(f"nbdcopy of {name}'s export: "
                + ("no end in 300 s" if copy is None else copy.stderr.strip()))
    else:
        bad = check_snapshot(backup, BLOCKS, low, high)
        if bad:
            t.error(f"export of {name}: {bad}")
        else:
            log(f"export of {name}: read by nbdcopy, {len(high)} written blocks as due")
    for leftover in (backup, address):
        try:
            os.unlink(leftover)
        except FileNotFoundError:
            pass
