"""The table of events: kind -> (function of the Thrash, weight, what it needs). A new kind
(qcow2, base=nbd, mirror, ...) is one function in a module of this package and one row here;
`needs` names a disk of `Thrash.disks` that must exist for the kind to run (None: always)."""

from . import export, faults, frontend, guest, life, migrate, mirror, qcow2, shares, snapshots

EVENTS = {
    "kill": (life.kill, 3, None),
    "term": (life.term, 2, None),
    "resize": (life.resize, 1, None),
    "disk": (life.add_remove_disk, 1, None),
    "share": (life.add_remove_share, 1, None),
    "reload": (life.reload, 1, None),
    "snapshot": (snapshots.snapshot, 2, None),
    "checkpoint": (snapshots.checkpoint, 2, None),
    "fs-full": (faults.fs_full, 1, None),
    "dm-error": (faults.dm_error, 1, "dm"),
    "dm-delay": (faults.dm_delay, 1, "dm"),
    "export": (export.export, 1, None),
    "drop": (frontend.drop, 1, None),
    "reboot": (guest.reboot, 1, None),
    "migrate": (migrate.migrate, 1, None),
    "move": (shares.move, 1, None),
    "qcow2": (qcow2.crash_mid_allocation, 1, "qcow2"),
    "mirror": (mirror.mirror, 1, None),
}


def kinds(disks):
    """The kinds this run can have, given its disks."""
    return [k for k, (_, _, needs) in EVENTS.items() if needs is None or needs in disks]
