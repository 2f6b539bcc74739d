//! A queue's engine that sees the range of every write, write-zeroes and discard before it
//! passes the operation on unchanged: the changed-block maps mark it.

use std::io;
use std::os::fd::RawFd;

use super::{Engine, IoOp};

/// What a layer does with a range about to change, on the queue's thread, before the
/// operation can reach the storage.
pub trait BeforeWrite: Send {
    /// Bytes `[offset, offset + len)` are about to change.
    fn before_write(&mut self, offset: u64, len: u64);
}

/// The inner engine, with `hook` called on each operation that changes the disk.
pub struct HookedEngine<H: BeforeWrite> {
    inner: Box<dyn Engine>,
    hook: H,
}

impl<H: BeforeWrite> HookedEngine<H> {
    /// `inner`, with `hook` before each change.
    pub fn new(inner: Box<dyn Engine>, hook: H) -> Self {
        HookedEngine { inner, hook }
    }
}

impl<H: BeforeWrite> Engine for HookedEngine<H> {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        match &op {
            IoOp::Write { offset, iov } => self.hook.before_write(*offset, iov.len() as u64),
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                self.hook.before_write(*offset, *len);
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
