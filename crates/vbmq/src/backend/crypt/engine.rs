//! A queue's engine over an encrypted disk: each read and write goes through a staging buffer,
//! decrypted or encrypted on the queue's thread.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::xts::{SECTOR, Xts};
use crate::backend::iovec::IovList;
use crate::backend::staging::Staging;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// Staging buffers kept for reuse.
const SPARE: usize = 64;

/// A read or write in the inner engine.
struct Pending {
    tag: u64,
    staging: Staging,
    len: usize,
    /// A read: the guest's buffers, filled once the read is decrypted.
    read_into: Option<(IovList, u64)>,
}

/// A queue's engine over an encrypted disk.
pub struct CryptEngine {
    inner: Box<dyn Engine>,
    xts: Arc<Xts>,
    pending: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Completions decided at push time.
    ready: Vec<(u64, i32)>,
    spare: Vec<Staging>,
    finished: Vec<(u64, i32)>,
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped (the
// `Engine::push` contract), and its own staging buffers; the engine moves between threads only
// with its worker and is never shared.
unsafe impl Send for CryptEngine {}

/// Tags of operations that are not reads or writes (flushes), passed through.
const PLAIN: u64 = 1 << 63;

impl CryptEngine {
    pub fn new(inner: Box<dyn Engine>, xts: Arc<Xts>) -> Self {
        CryptEngine {
            inner,
            xts,
            pending: Vec::new(),
            free: Vec::new(),
            ready: Vec::new(),
            spare: Vec::new(),
            finished: Vec::new(),
        }
    }

    fn staging(&mut self, len: usize) -> io::Result<Staging> {
        if let Some(i) = self.spare.iter().position(|s| s.capacity() >= len) {
            return Ok(self.spare.swap_remove(i));
        }
        Staging::new(len.next_power_of_two())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
    }

    fn recycle(&mut self, staging: Staging) {
        if self.spare.len() < SPARE && staging.capacity() <= 1 << 20 {
            self.spare.push(staging);
        }
    }

    /// Queues a read or write of `len` bytes at `offset` through a staging buffer.
    fn stage(&mut self, offset: u64, iov: IovList, tag: u64, write: bool) -> io::Result<()> {
        let len = iov.len();
        if !offset.is_multiple_of(SECTOR as u64) || !len.is_multiple_of(SECTOR) || len == 0 {
            self.ready.push((tag, -libc::EINVAL));
            return Ok(());
        }
        let mut staging = self.staging(len)?;
        let first = offset / SECTOR as u64;
        if write {
            // SAFETY: the staging buffer holds at least `len` bytes, apart from guest memory.
            unsafe { iov.copy_out(0, staging.as_ptr(), len) };
            self.xts.encrypt(staging.bytes(len), first);
        }
        let list = staging.list(len);
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.pending.push(None);
                self.pending.len() - 1
            }
        };
        self.pending[slot] = Some(Pending {
            tag,
            staging,
            len,
            read_into: (!write).then_some((iov, offset)),
        });
        let op = if write {
            IoOp::Write { offset, iov: list }
        } else {
            IoOp::Read { offset, iov: list }
        };
        if let Err(e) = self.inner.push(op, slot as u64) {
            if let Some(p) = self.pending[slot].take() {
                self.recycle(p.staging);
            }
            self.free.push(slot);
            return Err(e);
        }
        Ok(())
    }

    /// The guest's completion of inner operation `slot`.
    fn complete(&mut self, slot: u64, result: i32) -> Option<(u64, i32)> {
        if slot & PLAIN != 0 {
            return Some((slot & !PLAIN, result));
        }
        let index = host_size(slot);
        let mut p = self.pending.get_mut(index)?.take()?;
        self.free.push(index);
        let whole = usize::try_from(result).is_ok_and(|n| n == p.len);
        let result = match (whole, p.read_into) {
            (false, _) if result < 0 => result,
            (false, _) => -libc::EIO,
            (true, Some((iov, offset))) => {
                self.xts
                    .decrypt(p.staging.bytes(p.len), offset / SECTOR as u64);
                // SAFETY: the staging buffer holds `len` bytes, apart from guest memory.
                unsafe { iov.copy_in(0, p.staging.as_ptr(), p.len) };
                result
            }
            (true, None) => result,
        };
        let tag = p.tag;
        self.recycle(p.staging);
        Some((tag, result))
    }
}

impl Engine for CryptEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        match op {
            IoOp::Read { offset, iov } => self.stage(offset, iov, tag, false),
            IoOp::Write { offset, iov } => self.stage(offset, iov, tag, true),
            IoOp::Flush if tag & PLAIN == 0 => self.inner.push(op, tag | PLAIN),
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => {
                self.ready.push((tag, -libc::EOPNOTSUPP));
                Ok(())
            }
        }
    }

    fn submit(&mut self) -> io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        if self.ready.is_empty() {
            self.inner.wait()
        } else {
            self.inner.submit()
        }
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for (tag, result) in self.ready.drain(..) {
            done(tag, result);
        }
        let mut finished = std::mem::take(&mut self.finished);
        self.inner
            .reap(&mut |tag, result| finished.push((tag, result)));
        for (slot, result) in finished.drain(..) {
            if let Some((tag, result)) = self.complete(slot, result) {
                done(tag, result);
            }
        }
        self.finished = finished;
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}

impl Drop for CryptEngine {
    fn drop(&mut self) {
        // The kernel writes into staging buffers until their reads complete.
        while self.pending.iter().any(Option::is_some) {
            if let Err(e) = self.inner.wait() {
                crate::limited!(error, "encrypted disk: cannot wait for I/O to finish: {e}");
                for p in self.pending.iter_mut().filter_map(Option::take) {
                    std::mem::forget(p.staging);
                }
                return;
            }
            let mut finished = Vec::new();
            self.inner
                .reap(&mut |tag, result| finished.push((tag, result)));
            for (slot, _) in finished {
                // Completed: its staging buffer may go; the guest hears nothing.
                if slot & PLAIN == 0 {
                    let _ = self.pending.get_mut(host_size(slot)).and_then(Option::take);
                }
            }
        }
    }
}
