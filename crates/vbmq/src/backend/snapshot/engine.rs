//! On each queue's path: while a snapshot runs, a write copies the blocks it changes first,
//! through a buffer the queue keeps (allocated on its first copy, not per write).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use crate::backend::write_hook::BeforeWrite;

/// A queue's look at the snapshot before each change.
pub(super) struct SnapshotHook {
    pub shared: Arc<Shared>,
    pub buffer: Vec<u8>,
}

impl BeforeWrite for SnapshotHook {
    fn before_write(&mut self, offset: u64, len: u64) {
        // The only cost when no snapshot runs.
        if self.shared.active.load(Ordering::Acquire) {
            self.copy_first(offset, len);
        }
    }
}

impl SnapshotHook {
    /// A snapshot runs: copies the blocks `[offset, offset + len)` touches before they change.
    #[cold]
    fn copy_first(&mut self, offset: u64, len: u64) {
        if let Some(session) = self.shared.session() {
            session.before_write(offset, len, &mut self.buffer);
        }
    }
}
