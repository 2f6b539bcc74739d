//! A queue's engine over a disk that can be snapshotted: its writes copy first while a
//! snapshot runs.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use crate::backend::{Engine, IoOp};

/// A queue's engine: the inner engine's, with a look at the snapshot flag on each write.
pub struct SnapshotEngine {
    inner: Box<dyn Engine>,
    shared: Arc<Shared>,
}

impl SnapshotEngine {
    pub fn new(inner: Box<dyn Engine>, shared: Arc<Shared>) -> Self {
        SnapshotEngine { inner, shared }
    }

    /// A snapshot runs: copies the blocks `[offset, offset + len)` touches before they change.
    #[cold]
    fn copy_first(&self, offset: u64, len: u64) {
        if let Some(session) = self.shared.session() {
            session.before_write(offset, len);
        }
    }
}

impl Engine for SnapshotEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        let range = match op {
            IoOp::Write { offset, iov } => Some((offset, iov.len() as u64)),
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                Some((offset, len))
            }
            IoOp::Read { .. } | IoOp::Flush => None,
        };
        if let Some((offset, len)) = range
            && self.shared.active.load(Ordering::Acquire)
        {
            self.copy_first(offset, len);
        }
        self.inner.push(op, tag)
    }

    fn submit(&mut self) -> io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        self.inner.wait()
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        self.inner.reap(done);
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}
