//! On each queue's path: while a snapshot or an export runs, a write saves the blocks it
//! changes first, through a buffer the queue keeps (allocated on its first copy, not per write).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use super::session::CopyFirst;
use crate::backend::write_hook::BeforeWrite;

/// A queue's look at the snapshot before each change.
pub(super) struct SnapshotHook {
    pub shared: Arc<Shared>,
    pub buffer: Vec<u8>,
    /// The running copy or export as last seen, and its generation: no lock per write.
    pub current: Option<(u64, Arc<dyn CopyFirst>)>,
}

impl BeforeWrite for SnapshotHook {
    fn before_write(&mut self, offset: u64, len: u64) {
        // The only cost when no snapshot or export runs.
        if self.shared.active.load(Ordering::Acquire) {
            self.copy_first(offset, len);
        } else if self.current.is_some() {
            // Ended: its scratch file closes once no queue holds it.
            self.current = None;
        }
    }
}

impl SnapshotHook {
    /// A snapshot or an export runs: saves the blocks `[offset, offset + len)` touches
    /// before they change.
    fn copy_first(&mut self, offset: u64, len: u64) {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if self.current.as_ref().is_none_or(|(g, _)| *g != generation) {
            self.current = self.shared.session().map(|s| (generation, s));
        }
        if let Some((_, session)) = &self.current {
            session.before_write(offset, len, &mut self.buffer);
        }
    }
}
