"""An upgrade by restart: SIGTERM, then `vbmq serve` of another binary with the same `--config`
and `--state`, under the writers. The other binary is VBMQ_THRASH_NEXT (a newer build) or, by
default, a copy of the running one at another path (a new file, as a package upgrade makes).
The next upgrade goes back to the first. The disks and shares served before (run-time ones
from `--state` included) are served after, at the same sizes; the writers' read-back after
reconnecting is `kill`'s check."""

import json
import os
import shutil
import signal

from ..common import VBMQ, broken, log


def upgrade(t):
    if not t.extra_added:  # a run-time disk, which only `--state` brings back
        t.ctl("add-disk", f"socket={t.sock('extra')},path={t.path('extra.img')}")
        t.extra_added = True
    before = served(t)
    if before is None:
        return
    newer = VBMQ if t.binary != VBMQ else next_binary(t)
    t.stop_vbmq(signal.SIGTERM)
    # The break: the new binary started without `--state`, so the run-time disk is lost.
    t.start_vbmq(binary=newer, state=not broken("upgrade"))
    exe = os.readlink(f"/proc/{t.vbmq.pid}/exe")
    if exe != os.path.realpath(newer):
        t.error(f"upgrade: vbmq runs {exe}, not {newer}")
    after = served(t)
    if after is None:
        return
    if after != before:
        lost = {s: before[s] for s in before if after.get(s) != before[s]}
        t.error(f"upgrade to {newer}: served before and not after (socket: size): {lost}")
    else:
        log(f"upgrade to {newer}: the {len(after)} disks and shares served again")


def served(t):
    """Socket -> size (None for a share) of everything `list` says vbmq serves."""
    run = t.ctl("list")
    if run is None:
        return None
    return {d["socket"]: d.get("size") for d in json.loads(run.stdout) if "socket" in d}


def next_binary(t):
    newer = os.environ.get("VBMQ_THRASH_NEXT")
    if newer:
        return newer
    copy = t.path("vbmq-next")
    if not os.path.exists(copy):
        shutil.copy2(VBMQ, copy)
    return copy
