"""Host faults that stay on across the events that follow until their next turn clears them:
a full file system, a device range returning EIO, a slow device (device-mapper's `delay`, or
without device-mapper a loop device throttled by a blkio cgroup)."""

import time

from ..common import STALL, log


def toggle(t, writer, on, off):
    """Toggles a host fault on `writer`'s disk: on now, off the next time."""
    if writer in t.faulted:
        off()
        after_fault(t, writer)
    else:
        t.faulted[writer] = time.monotonic()  # before: its first IOERR may come at once
        on()


def after_fault(t, writer):
    """The disk serves again: a flushed round within STALL seconds."""
    cleared = time.monotonic()
    rounds = t.ledger.rounds(writer)
    while t.ledger.rounds(writer) <= rounds + 1:
        if time.monotonic() - cleared > STALL:
            t.error(f"{writer}: not serving {STALL:.0f} s after its fault cleared")
            break
        t.check_alive()
        time.sleep(0.1)
    t.fault_windows.append((writer, t.faulted.pop(writer), time.monotonic()))


def fs_full(t):
    toggle(t, "full", t.host.fill, t.host.unfill)


def dm_error(t):
    if t.host.dm_mode not in ("linear", "error"):
        return dm_delay(t)
    toggle(t, "dm", lambda: t.host.dm_set("error"), lambda: t.host.dm_set("linear"))


def dm_delay(t):
    if t.host.dm_mode not in ("linear", "delay"):
        return dm_error(t)
    # A slow device fails nothing: its writer is not excused any error, only the pause.
    if t.host.dm_mode == "delay":
        t.host.dm_set("linear")
    else:
        t.host.dm_set("delay")


def slow(t):
    """The loop device throttled to 1 MiB/s for vbmq (slow.py), or not: as `dm-delay`, a slow
    device fails nothing; its writer's rounds while slow show the throttle bit."""
    device = t.slow_device
    if not device.slow:
        t.slowed = (time.monotonic(), t.ledger.rounds("slow"), device.bytes_served())
        device.set(True)
        return
    device.set(False)
    began, rounds, served = t.slowed
    log(f"slow device: fast again after {time.monotonic() - began:.1f} s, "
        f"{t.ledger.rounds('slow') - rounds} rounds, "
        f"{(device.bytes_served() - served) >> 10} KiB through the throttle")


def clear_all(t):
    """Clears every fault still on at the end of the events, each disk then serving again."""
    for writer in list(t.faulted):
        {"full": t.host.unfill, "dm": lambda: t.host.dm_set("linear")}[writer]()
        after_fault(t, writer)
    if t.host.dm_mode not in (None, "linear"):
        t.host.dm_set("linear")
    if t.slow_device.slow:
        t.slow_device.set(False)
