"""A kill -9 aimed at the qcow2 disk: while its writer has a round in flight (clusters being
allocated, L2 tables and refcounts being updated), then `qemu-img check` before the restart
(vbmq.py's stop_vbmq) and the client's read-back of every block after it."""

import signal
import time

from ..common import log


def crash_mid_allocation(t):
    # Rounds are short: look for one in flight for a few seconds, then kill anyway.
    deadline = time.monotonic() + 5
    in_flight = False
    while not in_flight and time.monotonic() < deadline:
        t.sync_client()
        with t.lock:
            in_flight = t.ledger.unflushed("qcow2")
    t.stop_vbmq(signal.SIGKILL)
    log(f"qcow2: killed {'with' if in_flight else 'without'} a round in flight, "
        f"qemu-img check exit {t.qcow2_status} (0 clean, 3 leaks only)")
    t.start_vbmq()
