"""A frontend that goes away mid-I/O: the libblkio client closes one disk's connection with
writes in flight and connects again; it then reads every block back (thrash_client.rs) and
writes on."""

import time

from ..common import STALL, log


def drop(t):
    # A faulted disk's read-back waits for its fault: pick one that serves.
    names = [n for n in t.disks if n not in t.faulted]
    name = t.rng.choice(names)
    with t.lock:
        drops = t.ledger.drops(name)
    with t.synced:
        t.client.stdin.write(f"DROP {name}\n")
        t.client.stdin.flush()
    began = time.monotonic()
    while not t.ledger.reconnected_after_drop(name, drops):
        if time.monotonic() - began > STALL:
            t.error(f"{name}: not connected again {STALL:.0f} s after its frontend dropped")
            return
        t.check_alive()
        time.sleep(0.1)
    log(f"{name}: its frontend dropped mid-I/O and connected again, every block as due")
