"""The host moves a directory out of a share, and back at its next turn, while the share client
creates files through the node it holds (thrash_share_client.rs). While it is out, nothing
outside the share changes; back in, the client creates files in it again."""

import os
import time

from ..common import STALL, log


def tree(top):
    """What must not change under `top`: each entry's kind, mode, owner, size and mtime."""
    found = {}
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(parent, name)
            st = os.lstat(path)
            found[os.path.relpath(path, top)] = (st.st_mode, st.st_uid, st.st_gid, st.st_size,
                                                 st.st_mtime_ns)
    return found


def move(t):
    inside, out = t.path("shares/two/moving"), t.path("shares/outside/moving")
    if t.moved_out is None:
        os.rename(inside, out)
        t.sync_share()  # a request begun before the move may land in it: wait for its answer
        t.moved_out = tree(t.path("shares/outside"))
        log(f"moved {inside} out of its share ({len(t.moved_out)} entries outside)")
    else:
        move_back(t)


def check_outside(t):
    """While the directory is out: nothing under the outside directory changed since the move.
    Between events and at the move back."""
    if t.moved_out is None:
        return
    now = tree(t.path("shares/outside"))
    if now != t.moved_out:
        changed = sorted(k for k in now.keys() | t.moved_out.keys()
                         if now.get(k) != t.moved_out.get(k))
        t.error(f"a share's client changed {changed[:10]} outside the share")
        t.moved_out = now  # said once


def move_back(t):
    inside, out = t.path("shares/two/moving"), t.path("shares/outside/moving")
    check_outside(t)
    os.rename(out, inside)
    t.moved_out = None
    created = t.share_counts[0]
    began = time.monotonic()
    while t.share_counts[0] <= created:
        if time.monotonic() - began > STALL:
            t.error(f"the share client created nothing {STALL:.0f} s after its directory "
                    "came back")
            return
        t.check_alive()
        time.sleep(0.1)
    log(f"moved it back: the share client creates files in it again "
        f"({t.share_counts[0]} created, {t.share_counts[1]} refused so far)")


def clear(t):
    """At the end: a directory still out is checked and moved back."""
    if t.moved_out is not None:
        move_back(t)
