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
    device fails nothing. Its writer may pause up to 4 * STALL while slow (a read-back of its
    disk after a restart takes seconds), and must flush at once when fast again; the log line
    says its rounds while slow and the bytes the throttle counted, that it did bite."""
    device = t.slow_device
    if not device.slow:
        t.slowed = (time.monotonic(), t.ledger.rounds("slow"), device.bytes_served())
        device.set(True)
        return
    device.set(False)
    began, rounds, served = t.slowed
    fast = time.monotonic()
    after = t.ledger.rounds("slow")
    while t.ledger.rounds("slow") <= after + 1:  # its writer flushes at full speed again
        if time.monotonic() - fast > STALL:
            t.error(f"slow: no flushed round {STALL:.0f} s after the throttle was lifted")
            break
        t.check_alive()
        time.sleep(0.1)
    # Its pauses while slow are the fault's own, left out of the events' worst pauses.
    gap = t.ledger.longest_gap("slow", began, fast)
    t.fault_windows.append(("slow", began, time.monotonic()))
    t.slowed = None
    log(f"slow device: fast again after {fast - began:.1f} s, "
        f"{after - rounds} rounds while slow (longest gap {gap:.1f} s), "
        f"{(device.bytes_served() - served) >> 10} KiB through the throttle")


def clear_all(t):
    """Clears every fault still on at the end of the events, each disk then serving again."""
    for writer in list(t.faulted):
        {"full": t.host.unfill, "dm": lambda: t.host.dm_set("linear")}[writer]()
        after_fault(t, writer)
    if t.host.dm_mode not in (None, "linear"):
        t.host.dm_set("linear")
    if t.slow_device.slow:
        slow(t)
