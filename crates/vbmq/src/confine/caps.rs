//! Capabilities a process serving shares never needs.

use caps::{CapSet, Capability};

/// Drops `CAP_MKNOD` from every capability set of the calling thread, so from the threads it
/// starts later: a guest's MKNOD of a device node then fails in the kernel too, whatever the
/// passthrough lets by. Nothing vbmq does makes device nodes (sockets and FIFOs need no
/// capability). Without `CAP_SETPCAP` the bounding set stays as it is (a process without it
/// has no `CAP_MKNOD` to lose either, unless given one by file capabilities).
pub(super) fn drop_mknod() {
    // Effective before permitted (the effective set must stay a subset), bounding first while
    // CAP_SETPCAP is still effective.
    for set in [
        CapSet::Bounding,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        if let Err(e) = caps::drop(None, set, Capability::CAP_MKNOD) {
            tracing::debug!("CAP_MKNOD stays in the {set:?} set: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_set_keeps_cap_mknod_afterwards() {
        // A thread of its own: the test harness's other threads keep their capabilities.
        std::thread::spawn(|| {
            drop_mknod();
            for set in [CapSet::Effective, CapSet::Permitted] {
                assert!(!caps::has_cap(None, set, Capability::CAP_MKNOD).unwrap());
            }
        })
        .join()
        .unwrap();
    }
}
