"""Live migration of the guest with shared storage: a second QEMU, started with `-incoming` on
the other `handover=on` socket of the guest's image (world.py), receives the guest from QMP
`migrate` while its writers run; once the destination runs the guest, it is the thrasher's
guest (QMP, console, writer lines) and the source QEMU is stopped by its PID. The next
migration goes back to the first socket. The writers go on with no verify error (load.py), the
image holds every flushed generation once the destination runs, and the writers' pause is
reported as every event's."""

import os
import struct
import time

from ..checks import BLOCK
from ..common import GUEST_WRITERS, broken, log
from .guest import check_image

# A last resort against a hang: a migration of this idle 512 MiB guest takes seconds.
DEADLINE = 300.0
DOWNTIME_MS = 300


def migrate(t):
    source = t.qemu
    socket = t.sock("guest-b") if source.socket == t.sock("guest") else t.sock("guest")
    incoming = os.path.join(t.dir, f"migrate-{source.starts + 1}.sock")
    proc, qmp_socket, stderr = source.start(socket, incoming)
    try:
        began = time.monotonic()
        if not wait_state(t, source, qmp_socket, proc, "inmigrate", began):
            return
        source.qmp("migrate-set-parameters", **{"downtime-limit": DOWNTIME_MS,
                                                  "max-bandwidth": 1 << 30})
        source.qmp("migrate", uri=f"unix:{incoming}")
        info = wait_completed(t, source, began)
        if info is None or not wait_state(t, source, qmp_socket, proc, "running", began):
            return
        source.take_over(proc, qmp_socket, stderr, socket)
        proc = None
        if broken("migrate"):
            lose_a_flushed_block(t)
        check_image(t, [f"guest{i}" for i in range(GUEST_WRITERS)], "guest migration")
        log(f"guest migrated to {os.path.basename(socket)} in {time.monotonic() - began:.1f} s "
            f"({info.get('ram', {}).get('dirty-sync-count', 0)} rounds, "
            f"downtime {info.get('downtime', 0)} ms)")
    finally:
        if proc is not None:  # the destination of a migration that failed
            proc.kill()
            proc.wait()
            stderr.close()


def wait_completed(t, source, began):
    """The source's `query-migrate` until it says `completed`; None (an error) if it fails."""
    while True:
        info = source.qmp("query-migrate")
        status = info.get("status")
        if status == "completed":
            return info
        if status in ("failed", "cancelled") or time.monotonic() - began > DEADLINE:
            t.error(f"guest migration: {status} after {time.monotonic() - began:.0f} s: "
                    f"{info.get('error-desc', '')}")
            return None
        t.check_alive()
        time.sleep(0.1)


def wait_state(t, source, qmp_socket, proc, state, began):
    """Waits until the destination QEMU's `query-status` says `state` (`inmigrate`: it listens
    for the migration; `running`: it has loaded the devices and runs the guest)."""
    while True:
        if proc.poll() is not None:
            t.error(f"guest migration: the destination QEMU exited ({proc.returncode}) "
                    f"waiting for {state}")
            return False
        try:
            if source.qmp("query-status", qmp_socket=qmp_socket).get("status") == state:
                return True
        except OSError:
            pass  # its QMP socket not there yet
        if time.monotonic() - began > DEADLINE:
            t.error(f"guest migration: the destination not {state} after {DEADLINE:.0f} s")
            return False
        t.check_alive()
        time.sleep(0.1)


def lose_a_flushed_block(t):
    """The break: one block a guest writer flushed goes back to generation 0 on the image, as
    if the handover had lost a write."""
    with t.lock:
        flushed = t.ledger.flushed_map("guest0")
    if not flushed:
        return
    block = max(flushed, key=flushed.get)
    with open(t.path("guest.img"), "r+b") as f:
        os.pwrite(f.fileno(), struct.pack("<QQ", block, 0) * (BLOCK // 16), block * BLOCK)
