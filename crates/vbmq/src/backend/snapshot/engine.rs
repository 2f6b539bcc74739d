//! A queue's engine while a snapshot or an export may run: a guest write, write-zeroes or
//! discard to blocks not saved yet is held while the queue's own engine reads their old
//! contents (one read per run of adjacent blocks, into a buffer of this engine's); once read,
//! they are stored in the snapshot's file or the export's scratch and the operation goes on.
//! The queue's thread never waits meanwhile: other requests proceed. An operation that touches
//! a block being saved (by this queue or by another thread: a queue, the export's reader, the
//! snapshot's copier) waits in a list, tried again at each reaping pass; it never spins on
//! another thread's claim, since that thread may be waiting for this queue's save.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Shared;
use super::claims::Claimed;
use super::session::CopyFirst;
use crate::backend::layer::Slab;
use crate::backend::staging::Staging;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// The tag bit of this engine's own reads (a guest's tags are descriptor heads, 16 bits; a
/// mirror above uses bit 63).
const SAVE: u64 = 1 << 61;

/// A run of blocks whose old contents are being read.
struct Save {
    session: Arc<dyn CopyFirst>,
    first: u64,
    count: u64,
    len: usize,
    buffer: Staging,
}

/// A queue's engine under a snapshot or an export.
pub(super) struct SaveFirstEngine {
    inner: Box<dyn Engine>,
    shared: Arc<Shared>,
    /// The running copy or export as last seen, and its generation: no lock per write.
    current: Option<(u64, Arc<dyn CopyFirst>)>,
    saves: Slab<Save>,
    /// Guest operations held until their blocks are saved, in arrival order.
    waiting: Vec<(IoOp, u64)>,
    reaped: Vec<(u64, i32)>,
    /// Held operations the engine below refused once let go, answered at the next reap.
    refused: Vec<(u64, i32)>,
    /// A copy of the engine below's completion eventfd, written to come back for operations
    /// that wait for another thread's save (no completion of this queue's would wake it).
    wake: Option<OwnedFd>,
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped
// (the `Engine::push` contract), and its own staging buffers; the engine moves between
// threads only with its worker and is never shared.
unsafe impl Send for SaveFirstEngine {}

fn duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the engine below keeps open; the result is
    // checked.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

/// The range an operation changes, if it changes one.
fn changes(op: &IoOp) -> Option<(u64, u64)> {
    match *op {
        IoOp::Write { offset, iov } => Some((offset, iov.len() as u64)),
        IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
            Some((offset, len))
        }
        IoOp::Read { .. } | IoOp::Flush => None,
    }
}

impl SaveFirstEngine {
    pub(super) fn new(inner: Box<dyn Engine>, shared: Arc<Shared>) -> io::Result<Self> {
        let wake = inner.completion_fd().map(duplicate).transpose()?;
        Ok(SaveFirstEngine {
            inner,
            shared,
            current: None,
            saves: Slab::new(),
            waiting: Vec::new(),
            reaped: Vec::new(),
            refused: Vec::new(),
            wake,
        })
    }

    /// The running copy or export, if any.
    fn session(&mut self) -> Option<Arc<dyn CopyFirst>> {
        if !self.shared.active.load(Ordering::Acquire) {
            // Ended: its file closes once no queue holds it.
            if self.saves.is_empty() {
                self.current = None;
            }
            return None;
        }
        let generation = self.shared.generation.load(Ordering::Acquire);
        if self.current.as_ref().is_none_or(|(g, _)| *g != generation) {
            self.current = self.shared.session().map(|s| (generation, s));
        }
        self.current.as_ref().map(|(_, s)| s.clone())
    }

    /// Whether `[offset, offset + len)` meets a run this queue is reading.
    fn meets_own_save(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        self.saves.values().any(|save| {
            let (at, bytes) = save.session.run_bytes(save.first, save.count);
            at < end && offset < at + bytes
        })
    }

    /// Pushes `op` below if its blocks are saved; otherwise starts the reads of those not
    /// being saved and returns it to wait.
    fn start(&mut self, op: IoOp, tag: u64) -> io::Result<Option<(IoOp, u64)>> {
        let (Some((offset, len)), Some(session)) = (changes(&op), self.session()) else {
            return self.inner.push(op, tag).map(|()| None);
        };
        if self.meets_own_save(offset, len) {
            return Ok(Some((op, tag)));
        }
        match session.claim(offset, len) {
            Claimed::Runs(runs) if runs.is_empty() => self.inner.push(op, tag).map(|()| None),
            Claimed::Runs(runs) => {
                for (first, count) in runs {
                    self.read_old(&session, first, count);
                }
                Ok(Some((op, tag)))
            }
            Claimed::Busy => Ok(Some((op, tag))),
        }
    }

    /// Queues the read of the old contents of a claimed run; failing that, lets it go.
    fn read_old(&mut self, session: &Arc<dyn CopyFirst>, first: u64, count: u64) {
        let (offset, len) = session.run_bytes(first, count);
        let len = host_size(len);
        let Some(mut buffer) = Staging::new(len) else {
            session.abandon(first, count, io::ErrorKind::OutOfMemory.into());
            return;
        };
        let read = IoOp::Read {
            offset,
            iov: buffer.list(len),
        };
        let slot = self.saves.insert(Save {
            session: session.clone(),
            first,
            count,
            len,
            buffer,
        });
        if let Err(e) = self.inner.push(read, SAVE | slot as u64)
            && let Some(save) = self.saves.take(slot)
        {
            save.session.abandon(first, count, e);
        }
    }

    /// A read of old contents completed with `result`: stores them (zeros past a short
    /// read's end: the file ends there) and lets the run go.
    fn finish(&mut self, slot: usize, result: i32) {
        let Some(mut save) = self.saves.take(slot) else {
            return;
        };
        if result < 0 {
            let error = io::Error::from_raw_os_error(-result);
            save.session.abandon(save.first, save.count, error);
        } else {
            let data = save.buffer.bytes(save.len);
            save.session.saved(save.first, save.count, data);
        }
    }

    /// Tries the held operations again; returns whether any went below.
    fn retry(&mut self) -> bool {
        let mut pushed = false;
        for (op, tag) in std::mem::take(&mut self.waiting) {
            match self.start(op, tag) {
                Ok(None) => pushed = true,
                Ok(Some(held)) => self.waiting.push(held),
                // A full ring: tried again at the next pass.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.waiting.push((op, tag)),
                Err(e) => {
                    crate::limited!(warn, "snapshot: a held write could not be queued: {e}");
                    self.refused
                        .push((tag, -e.raw_os_error().unwrap_or(libc::EIO)));
                }
            }
        }
        pushed
    }

    /// Comes back soon for operations only another thread's save holds.
    fn wake_later(&self) {
        if self.waiting.is_empty() || !self.saves.is_empty() {
            return;
        }
        if let Some(fd) = &self.wake {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a u64 to an eventfd; a full counter only means the
            // worker is being woken already.
            let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

impl Engine for SaveFirstEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        // The only cost when no snapshot or export runs.
        if !self.shared.active.load(Ordering::Acquire) && self.saves.is_empty() {
            self.current = None;
            return self.inner.push(op, tag);
        }
        if let Some(held) = self.start(op, tag)? {
            self.waiting.push(held);
        }
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        if self.saves.is_empty() && !self.waiting.is_empty() {
            // Held by another thread's save only: nothing below may complete.
            if !self.retry() {
                std::thread::yield_now();
            }
            return self.inner.submit();
        }
        self.inner.wait()
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        loop {
            let mut reaped = std::mem::take(&mut self.reaped);
            self.inner.reap(&mut |tag, result| {
                if tag & SAVE == 0 {
                    done(tag, result);
                } else {
                    reaped.push((tag, result));
                }
            });
            for &(tag, result) in &reaped {
                self.finish(host_size(tag & !SAVE), result);
            }
            reaped.clear();
            self.reaped = reaped;
            if self.waiting.is_empty() || !self.retry() {
                break;
            }
            // What went below may have completed at push time (a tmpfs image): reaped now.
            if let Err(e) = self.inner.submit() {
                crate::limited!(debug, "snapshot: submit: {e}");
            }
        }
        for (tag, result) in self.refused.drain(..) {
            done(tag, result);
        }
        self.wake_later();
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}

impl Drop for SaveFirstEngine {
    /// Waits for the reads in flight (the kernel writes into their buffers) and stores what
    /// they read; held writes never reached the disk.
    fn drop(&mut self) {
        while !self.saves.is_empty() {
            if self.inner.wait().is_err() {
                for save in self.saves.drain() {
                    save.session
                        .abandon(save.first, save.count, io::Error::other("queue stopped"));
                    std::mem::forget(save.buffer);
                }
                return;
            }
            let mut reaped = Vec::new();
            self.inner
                .reap(&mut |tag, result| reaped.push((tag, result)));
            for (tag, result) in reaped {
                if tag & SAVE != 0 {
                    self.finish(host_size(tag & !SAVE), result);
                }
            }
        }
    }
}
