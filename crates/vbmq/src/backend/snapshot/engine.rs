//! On each queue's path: while a snapshot runs, a write copies the blocks it changes first.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use crate::backend::write_hook::BeforeWrite;

impl BeforeWrite for Arc<Shared> {
    fn before_write(&self, offset: u64, len: u64) {
        // The only cost when no snapshot runs.
        if self.active.load(Ordering::Acquire) {
            copy_first(self, offset, len);
        }
    }
}

/// A snapshot runs: copies the blocks `[offset, offset + len)` touches before they change.
#[cold]
fn copy_first(shared: &Shared, offset: u64, len: u64) {
    if let Some(session) = shared.session() {
        session.before_write(offset, len);
    }
}
