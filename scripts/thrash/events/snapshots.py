"""Point-in-time copies checked against the writers' stamps: snapshots, and checkpoints with
their changed blocks."""

import json
import os
import time

from ..checks import check_snapshot, differing_blocks
from ..common import BLOCKS, log


def snapshot(t):
    name = t.rng.choice(["plain", "track", "qcow2"])
    target = t.path(f"snap/{name}.raw")
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map(name)
    if t.ctl("snapshot", t.sock(name), target, "--force") is None:
        return
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map(name)
    bad = check_snapshot(target, BLOCKS, low, high)
    if bad:
        t.error(f"snapshot of {name}: {bad}")
    else:
        log(f"snapshot of {name}: {len(high)} written blocks as due")
    os.unlink(target)


def checkpoint(t):
    """Begins map N with a snapshot, then checks changed-blocks against it: after a few
    seconds of writes, or one time in four at the next checkpoint event, other events
    (kills: the map must then be refused) between."""
    if t.checkpoint is None:
        begin_checkpoint(t)
        if t.checkpoint is None or t.rng.random() < 0.25:
            return
        until = time.monotonic() + t.rng.uniform(1.0, 3.0)
        while time.monotonic() < until:
            t.check_alive()
            time.sleep(0.1)
    check_checkpoint(t)


def begin_checkpoint(t):
    name = f"cp{len(t.events)}"
    first = t.path("snap/first.raw")
    t.sync_client()
    with t.lock:
        low = t.ledger.flushed_map("track")
    if t.ctl("snapshot", t.sock("track"), first, "--force", "--name", name) is None:
        return
    t.sync_client()
    with t.lock:
        high = t.ledger.written_map("track")
    bad = check_snapshot(first, BLOCKS, low, high)
    if bad:
        t.error(f"snapshot --name {name}: {bad}")
    t.checkpoint = name
    t.kills_since_checkpoint = 0


def check_checkpoint(t):
    """A second snapshot, then changed-blocks: every block that differs between the two
    snapshots was written after the map began, so it must be listed."""
    name, t.checkpoint = t.checkpoint, None
    first, second = t.path("snap/first.raw"), t.path("snap/second.raw")
    if t.ctl("snapshot", t.sock("track"), second, "--force") is None:
        return
    run = t.ctl("changed-blocks", t.sock("track"), "--since", name, ok=False)
    if run is None:
        return
    if t.kills_since_checkpoint:
        # A kill leaves the map file "in use": every map is invalid, by design.
        if run.returncode == 0:
            t.error(f"changed-blocks {name} answered after a kill -9: {run.stdout[:200]}")
        else:
            log(f"changed-blocks {name} refused after a kill -9, as it must")
    elif run.returncode != 0:
        t.error(f"changed-blocks {name}: exit {run.returncode}: {run.stderr.strip()}")
    else:
        listed = set()
        for extent in json.loads(run.stdout)["extents"]:
            start = extent["offset"] // 4096
            listed.update(range(start, start + -(-extent["length"] // 4096)))
        changed = differing_blocks(first, second)
        missing = sorted(changed - listed)
        if missing:
            t.error(f"changed-blocks {name} misses blocks {missing[:10]} "
                    f"({len(missing)} of the {len(changed)} that changed)")
        else:
            log(f"changed-blocks {name}: {len(listed)} blocks listed, "
                f"the {len(changed)} that changed among them")
    os.unlink(second)
    t.ctl("forget-checkpoint", t.sock("track"), name, ok=False)
