//! A queue's engine over a tracked disk: marks what each write, write-zeroes and discard
//! covers in the live maps, then hands the operation on unchanged.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::map::ChangeMap;
use crate::backend::{Engine, IoOp};

/// A queue's engine over a tracked disk.
pub struct TrackedEngine {
    inner: Box<dyn Engine>,
    map: Arc<ChangeMap>,
}

impl TrackedEngine {
    pub fn new(inner: Box<dyn Engine>, map: Arc<ChangeMap>) -> Self {
        TrackedEngine { inner, map }
    }
}

impl Engine for TrackedEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        // Before the operation can reach the storage: a map never misses a block that
        // changed, at worst it holds one whose write then failed.
        match op {
            IoOp::Write { offset, iov } => self.map.mark(offset, iov.len() as u64),
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                self.map.mark(offset, len);
            }
            IoOp::Read { .. } | IoOp::Flush => {}
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
