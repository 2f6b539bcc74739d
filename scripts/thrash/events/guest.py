"""The guest reboots (QMP `system_reset`): its in-flight requests are abandoned, its memory
lost. Right after the reset, every block holds at least the generation its writer flushed; the
writers then boot again, read their blocks back, and resume from what the blocks hold
(scripts/thrash/guest_writer.c), flushing new rounds."""

import struct
import time

from ..checks import BLOCK
from ..common import GUEST_BLOCKS, GUEST_WRITERS, log

# A last resort against a hang: a boot under TCG took up to 203 s on this loaded machine.
BOOT = 600.0


def reboot(t):
    writers = [f"guest{i}" for i in range(GUEST_WRITERS)]
    t.rebooting = True
    began = time.monotonic()
    try:
        t.qemu.qmp("system_reset")
        check_image(t, writers)
        wait_resumed(t, writers, began)
    finally:
        t.rebooting = False
    # The writers' pause is the boot's: left out of the worst pauses, as a fault's.
    t.fault_windows.extend((w, began, time.monotonic()) for w in writers)


def check_image(t, writers, what="guest reset", image=None):
    """No flushed write lost across the reset (or `what`) on the guest's image (or `image`): a
    writer's block holds its last flushed generation or a later one (later ones whose `GW`
    line the console had not delivered yet included). Returns whether it does."""
    with t.lock:
        flushed = [t.ledger.flushed_map(w) for w in writers]
    with open(image or t.path("guest.img"), "rb") as f:
        data = f.read(GUEST_BLOCKS * BLOCK)
    for block in range(GUEST_BLOCKS):
        low = flushed[block % GUEST_WRITERS].get(block, 0)
        if low == 0:
            continue
        chunk = data[block * BLOCK:(block + 1) * BLOCK]
        number, generation = struct.unpack_from("<QQ", chunk)
        uniform = chunk == chunk[:16] * (BLOCK // 16)
        if not (uniform and number == block and generation >= low):
            t.error(f"{what}: block {block} holds ({number}, {generation}) where "
                    f"generation {low} or later was flushed")
            return False
    log(f"{what}: every flushed block holds its generation or a later one")
    return True


def wait_resumed(t, writers, began):
    """Every writer reads its blocks back and flushes a round after the reset, within BOOT
    seconds."""
    def resumed(w):
        # `GR` (counted as a connect) after the reset, then a flushed round after that.
        connected = t.ledger.last_connect(w)
        return connected > began and (t.ledger.last_progress(w) or 0) > connected

    while not all(resumed(w) for w in writers):
        if time.monotonic() - began > BOOT:
            t.error(f"guest reboot: the writers did not resume within {BOOT:.0f} s: "
                    + t.qemu.tail())
            return
        t.check_alive()
        time.sleep(0.2)
    log(f"guest rebooted, its writers resumed in {time.monotonic() - began:.1f} s")
