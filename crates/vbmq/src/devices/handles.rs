//! A disk's verbs that one layer answers (its snapshots and exports, its changed-block maps, its
//! writer seat): the builder keeps a handle on that layer beside the disk, so no other layer
//! passes the call down.

use std::fs::File;
use std::io;
use std::sync::{Arc, Weak};

use crate::backend::{
    ChangeMap, Disk, Fleece, MirrorDisk, SnapshotDisk, SnapshotReport, WriterSeat,
};
use crate::nbd::Export;

/// What the layers of one disk answer themselves; `None` where the stack has no such layer.
#[derive(Clone, Default)]
pub(crate) struct Handles {
    /// The image's write lock, when it is handed over between disks (`handover=on`).
    pub writer_seat: Option<Arc<WriterSeat>>,
    /// The snapshot layer, directly above a `path=` disk's storage.
    pub snapshots: Option<Arc<SnapshotDisk>>,
    /// Why the disk has no snapshot layer, when its storage has snapshots of its own (RBD).
    pub snapshots_elsewhere: Option<&'static str>,
    /// The changed-block maps (`track-changes=on`). Weak: a disk dropped unserved closes its
    /// maps cleanly only when nothing else holds them (see `TrackedDisk`'s `Drop`).
    pub changes: Option<Weak<ChangeMap>>,
    /// Why an export of the snapshot layer would not serve what the guest sees (a cipher above
    /// it would serve ciphertext), if it would not.
    pub export_refused: Option<&'static str>,
    /// The layers above the snapshot layer, bottom up: each maps what an export serves (a
    /// cipher decrypts). Weak, as `changes`.
    pub export_views: Vec<Weak<dyn Disk>>,
    /// The mirror layer (`mirror-begin`), at the top of the stack or under the cipher. Weak,
    /// as `changes`.
    pub mirror: Option<Weak<MirrorDisk>>,
}

impl Handles {
    /// Writes the disk's contents at one instant into `to` (see [`SnapshotDisk`]).
    pub fn snapshot(&self, to: File) -> io::Result<SnapshotReport> {
        self.snapshots()
            .ok_or_else(|| {
                unsupported(
                    self.snapshots_elsewhere
                        .unwrap_or("only path= disks have snapshots"),
                )
            })?
            .snapshot(to)
    }

    /// Begins a read-only export of the disk as it is now, saving into `scratch`.
    pub fn export_begin(&self, scratch: File) -> io::Result<Arc<Fleece>> {
        if let Some(why) = self.export_refused {
            return Err(unsupported(why));
        }
        self.snapshots()
            .ok_or_else(|| unsupported("only path= disks have exports"))?
            .begin_export(scratch)
    }

    /// What an export of the snapshot layer (`fleece`) serves as the guest's disk: through
    /// each layer above it.
    pub fn export_view(&self, fleece: Arc<Fleece>) -> Arc<dyn Export> {
        let mut export: Arc<dyn Export> = fleece;
        for layer in self.export_views.iter().filter_map(Weak::upgrade) {
            export = layer.export_view(export);
        }
        export
    }

    /// Ends the running export, if any.
    pub fn export_end(&self) {
        if let Some(snapshots) = self.snapshots() {
            snapshots.end_export();
        }
    }

    /// The changed-block maps, while the disk is open.
    pub fn changes(&self) -> Option<Arc<ChangeMap>> {
        self.changes.as_ref()?.upgrade()
    }

    /// The mirror layer, while the disk is open.
    pub fn mirror(&self) -> Option<Arc<MirrorDisk>> {
        self.mirror.as_ref()?.upgrade()
    }

    fn snapshots(&self) -> Option<&SnapshotDisk> {
        self.snapshots.as_deref()
    }
}

fn unsupported(why: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, why)
}
