"""Life events of the process and its control plane: kill, SIGTERM, resize, run-time disks and
shares, reload."""

import json
import signal

from ..common import MIB


def kill(t):
    t.stop_vbmq(signal.SIGKILL)
    t.start_vbmq()


def term(t):
    t.stop_vbmq(signal.SIGTERM)
    t.start_vbmq()


def resize(t):
    name = t.rng.choice(["guest", "thin"])
    listing = json.loads(t.ctl("list").stdout)
    # The guest's disk: the socket its QEMU is on (the other one's after a live migration).
    sock = t.qemu.socket if name == "guest" else t.sock(name)
    size = next(d["size"] for d in listing if d.get("socket") == sock)
    t.ctl("resize", sock, str(size + MIB))


def add_remove_disk(t):
    if t.extra_added:
        t.ctl("remove-disk", t.sock("extra"))
    else:
        t.ctl("add-disk", f"socket={t.sock('extra')},path={t.path('extra.img')}")
    t.extra_added = not t.extra_added


def add_remove_share(t):
    if t.share_added:
        t.ctl("remove-fs", t.sock("share"))
    else:
        t.add_share()
    t.share_added = not t.share_added


def reload(t):
    t.limits = t.rng.choice([0, 2000, 50000])
    t.write_config()
    replace = t.rng.random() < 0.3
    t.ctl("reload", *(["--replace"] if replace else []))
