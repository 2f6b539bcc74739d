"""The table of events: kind -> (function of the Thrash, weight, what it needs). A new kind
(qcow2, base=nbd, mirror, ...) is one function in a module of this package and one row here;
`needs` names a disk of `Thrash.disks` that must exist for the kind to run (None: always)."""

from . import (export, faults, frontend, guest, life, migrate, mirror, mirror_migrate, nbd_base,
               qcow2, qcow2_base, shares, snapshots, tls_export, upgrade)

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
    "slow": (faults.slow, 1, "slow"),
    "export": (export.export, 1, None),
    "drop": (frontend.drop, 1, None),
    "reboot": (guest.reboot, 1, None),
    "migrate": (migrate.migrate, 1, None),
    "move": (shares.move, 1, None),
    "qcow2": (qcow2.crash_mid_allocation, 1, "qcow2"),
    "qcow2-base": (qcow2_base.qcow2_base, 1, None),
    "mirror": (mirror.mirror, 1, None),
    "mirror-migrate": (mirror_migrate.mirror_migrate, 1, None),
    "nbd-base": (nbd_base.nbd_base, 1, "nbdbase"),
    "tls-export": (tls_export.tls_export, 1, None),
    "upgrade": (upgrade.upgrade, 1, None),
}


def kinds(disks, only=None):
    """The kinds this run can have, given its disks (and `only` these, when given)."""
    unknown = set(only or []) - set(EVENTS)
    if unknown:
        raise ValueError(f"--only: no event kind {', '.join(sorted(unknown))}")
    return [k for k, (_, _, needs) in EVENTS.items()
            if (needs is None or needs in disks) and (only is None or k in only)]
