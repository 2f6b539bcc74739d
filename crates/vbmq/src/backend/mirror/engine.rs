//! A queue's engine under a mirror. While no mirror runs it passes every operation on as it
//! came, after one atomic load per operation. While one runs, a write is copied once from the
//! guest's buffers (so that both sides get the same bytes whatever the guest does to them
//! meanwhile) and written from that copy to the disk below and to the destination; the guest's
//! request is answered with the disk's result once both are done (QEMU's `write-blocking`
//! copy mode). Write-zeroes and discards become write-zeroes on the destination, flushes
//! flush it too. The destination's failure fails the mirror, never the guest's request.
//!
//! The writes of one pass of the queue go to the destination together, when the pass submits
//! (one system call, replies read in few), and the destination's answers to them come back to
//! the queue's thread together, through its completion eventfd: the queue's thread never
//! waits for the network, and a pass of 32 writes costs one round trip, not 32.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::Control;
use super::destination::{Batch, Done, Remote};
use super::run::Run;
use crate::backend::layer::Slab;
use crate::backend::staging::Staging;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// The tag bit of the operations this engine joins with the destination's (a guest's tags
/// are descriptor heads: 16 bits).
const JOINED: u64 = 1 << 63;

/// The destination's answers, from the NBD client's thread to the queue's.
struct Inbox {
    done: Mutex<Vec<(usize, Result<(), String>)>>,
    arrived: Condvar,
    /// Written on each answer to wake a sleeping worker: a copy of the engine's completion
    /// eventfd, or one of its own for an engine that has none.
    wake: Option<OwnedFd>,
}

impl Inbox {
    fn post(&self, answers: Vec<(usize, Result<(), String>)>) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(answers);
        self.arrived.notify_one();
        if let Some(fd) = &self.wake {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a u64 to an eventfd; a full counter only means the
            // worker is being woken already.
            let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

/// The destination's answers to one batch, handed to the queue's thread when the last comes
/// (one wake-up per batch).
struct Answers {
    left: AtomicUsize,
    arrived: Mutex<Vec<(usize, Result<(), String>)>>,
    inbox: Arc<Inbox>,
}

impl Answers {
    fn answer(&self, join: usize, result: Result<(), String>) {
        let mut answers = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        answers.push((join, result));
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            let all = std::mem::take(&mut *answers);
            drop(answers);
            self.inbox.post(all);
        }
    }
}

/// A guest operation sent to both sides.
struct Join {
    tag: u64,
    local: Option<i32>,
    remote: bool,
    /// The range a write changes (none for a flush).
    range: Option<(u64, u64)>,
    run: Arc<Run>,
    /// A write's copy of the guest's data, which the disk below and the destination read
    /// from.
    buffer: Option<Staging>,
}

impl Join {
    /// What the destination is sent for this operation.
    fn remote(&self) -> Remote<'_> {
        match (self.range, &self.buffer) {
            (Some((offset, len)), Some(buffer)) => Remote::Write {
                offset,
                // SAFETY: the buffer holds at least `len` bytes, copied from the guest; the
                // disk below only reads it meanwhile.
                data: unsafe { std::slice::from_raw_parts(buffer.as_ptr(), host_size(len)) },
            },
            (Some((offset, len)), None) => Remote::Zeroes {
                offset,
                len: u32::try_from(len).unwrap_or(u32::MAX),
            },
            (None, _) => Remote::Flush,
        }
    }
}

/// Copies of guest data kept for reuse, at most this many...
const SPARE_BUFFERS: usize = 64;
/// ...each of at most this many bytes.
const SPARE_BYTES: usize = 128 << 10;

/// A queue's engine under a mirror.
pub(super) struct MirrorEngine {
    inner: Box<dyn Engine>,
    control: Arc<Control>,
    /// The running mirror as last seen, and its generation: no lock per write.
    current: Option<(u64, Arc<Run>)>,
    joins: Slab<Join>,
    /// Joins pushed in this pass whose destination side is not sent yet.
    unsent: Vec<usize>,
    /// Buffers of joins done, for the next writes.
    spare: Vec<Staging>,
    inbox: Arc<Inbox>,
    /// Answers decided in this pass (joins done by the destination's answer).
    answers: Vec<(u64, i32)>,
    reaped: Vec<(u64, i32)>,
    /// This engine's own eventfd, when the engine below has none (`notify` asked).
    own_fd: Option<RawFd>,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

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

impl MirrorEngine {
    pub(super) fn new(
        inner: Box<dyn Engine>,
        control: Arc<Control>,
        notify: bool,
    ) -> io::Result<Self> {
        let (wake, own_fd) = match inner.completion_fd() {
            Some(fd) => (Some(duplicate(fd)?), None),
            None if notify => {
                let own = eventfd()?;
                let raw = own.as_raw_fd();
                (Some(own), Some(raw))
            }
            None => (None, None),
        };
        Ok(MirrorEngine {
            inner,
            control,
            current: None,
            joins: Slab::new(),
            unsent: Vec::new(),
            spare: Vec::new(),
            inbox: Arc::new(Inbox {
                done: Mutex::new(Vec::new()),
                arrived: Condvar::new(),
                wake,
            }),
            answers: Vec::new(),
            reaped: Vec::new(),
            own_fd,
        })
    }

    /// The running (or failed) mirror.
    fn run(&mut self) -> Option<Arc<Run>> {
        let generation = self.control.generation.load(Ordering::Acquire);
        if self.current.as_ref().is_none_or(|(g, _)| *g != generation) {
            self.current = self.control.run().map(|run| (generation, run));
        }
        self.current.as_ref().map(|(_, run)| run.clone())
    }

    /// A buffer of at least `len` bytes for a write's copy.
    fn buffer(&mut self, len: usize) -> io::Result<Staging> {
        match self.spare.pop() {
            Some(spare) if spare.capacity() >= len => Ok(spare),
            _ => Staging::new(len).ok_or_else(|| io::ErrorKind::OutOfMemory.into()),
        }
    }

    /// Pushes `op` to the disk below and queues it for the destination (sent when the pass
    /// submits), answered as `tag` once both sides are done.
    fn push_joined(&mut self, run: Arc<Run>, op: IoOp, tag: u64) -> io::Result<()> {
        let (range, mut buffer) = match op {
            IoOp::Write { offset, iov } => {
                let len = iov.len();
                let buffer = self.buffer(len)?;
                // SAFETY: the buffer holds at least `len` bytes and is not the guest's.
                unsafe { iov.copy_out(0, buffer.as_ptr(), len) };
                (Some((offset, len as u64)), Some(buffer))
            }
            IoOp::WriteZeroes { offset, len, .. } | IoOp::Discard { offset, len } => {
                (Some((offset, len)), None)
            }
            IoOp::Flush => (None, None),
            IoOp::Read { .. } => return self.inner.push(op, tag),
        };
        let local = match (op, buffer.as_mut()) {
            (IoOp::Write { offset, iov }, Some(buffer)) => IoOp::Write {
                offset,
                iov: buffer.list(iov.len()),
            },
            _ => op,
        };
        if let Some((offset, len)) = range {
            run.write_begins(offset, len);
        }
        let join = self.joins.insert(Join {
            tag,
            local: None,
            remote: false,
            range,
            run,
            buffer,
        });
        if let Err(e) = self.inner.push(local, JOINED | join as u64) {
            if let Some(join) = self.joins.take(join)
                && let Some((offset, len)) = join.range
            {
                join.run.write_ends(offset, len);
            }
            return Err(e);
        }
        self.unsent.push(join);
        Ok(())
    }

    /// Sends the destination side of the joins pushed since the last call, together; the
    /// answers come back as one batch.
    fn send_unsent(&mut self) {
        let mut unsent = std::mem::take(&mut self.unsent);
        unsent.retain(|&index| self.joins.get(index).is_some());
        if !unsent.is_empty() {
            let answers = Arc::new(Answers {
                left: AtomicUsize::new(unsent.len()),
                arrived: Mutex::new(Vec::with_capacity(unsent.len())),
                inbox: self.inbox.clone(),
            });
            // In order, a group per mirror: one that ended and the next may share a pass.
            let mut group: Option<(Arc<Run>, Batch<'_>)> = None;
            for &index in &unsent {
                let Some(join) = self.joins.get(index) else {
                    continue;
                };
                if let Some((run, requests)) =
                    group.take_if(|(run, _)| !Arc::ptr_eq(run, &join.run))
                {
                    run.submit_all(requests);
                }
                let (_, requests) = group.get_or_insert_with(|| (join.run.clone(), Vec::new()));
                let answers = answers.clone();
                let done: Done = Box::new(move |result| answers.answer(index, result));
                requests.push((join.remote(), done));
            }
            if let Some((run, requests)) = group {
                run.submit_all(requests);
            }
        }
        unsent.clear();
        self.unsent = unsent;
    }

    /// One side of `join` is done: answers the guest once both are.
    fn side_done(&mut self, join: usize) {
        let done = self
            .joins
            .get(join)
            .is_some_and(|j| j.remote && j.local.is_some());
        if !done {
            return;
        }
        let Some(join) = self.joins.take(join) else {
            return;
        };
        if let Some((offset, len)) = join.range {
            join.run.write_ends(offset, len);
        }
        self.answers
            .push((join.tag, join.local.unwrap_or(-libc::EIO)));
        if let Some(buffer) = join.buffer
            && buffer.capacity() <= SPARE_BYTES
            && self.spare.len() < SPARE_BUFFERS
        {
            self.spare.push(buffer);
        }
    }

    /// Takes the destination's answers.
    fn take_remote(&mut self) {
        let arrived =
            std::mem::take(&mut *self.inbox.done.lock().unwrap_or_else(|p| p.into_inner()));
        for (join, result) in arrived {
            if let Some(j) = self.joins.get_mut(join) {
                j.remote = true;
                if let Err(why) = result {
                    j.run.fail(format!("destination: {why}"));
                    if let Some((offset, len)) = j.range {
                        j.run.unsynced(offset, len);
                    }
                }
            }
            self.side_done(join);
        }
    }

    /// Whether every join waits for the destination only.
    fn only_remote_pending(&self) -> bool {
        !self.joins.is_empty() && self.joins.values().all(|j| j.local.is_some())
    }
}

impl Engine for MirrorEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        // The only cost when no mirror runs.
        if !self.control.active.load(Ordering::Acquire) {
            if self.current.is_some() && self.joins.is_empty() {
                self.current = None;
            }
            return self.inner.push(op, tag);
        }
        match (self.run(), op) {
            (_, IoOp::Read { .. }) | (None, _) => self.inner.push(op, tag),
            (Some(run), _) if !run.is_failed() => self.push_joined(run, op, tag),
            // The destination misses this write: a resumed mirror copies its chunks again.
            (Some(run), IoOp::Write { offset, iov }) => {
                run.unsynced(offset, iov.len() as u64);
                self.inner.push(op, tag)
            }
            (Some(run), IoOp::WriteZeroes { offset, len, .. } | IoOp::Discard { offset, len }) => {
                run.unsynced(offset, len);
                self.inner.push(op, tag)
            }
            (Some(_), IoOp::Flush) => self.inner.push(op, tag),
        }
    }

    /// Starts the disk's side first, then sends the destination's, the pass's writes together.
    fn submit(&mut self) -> io::Result<()> {
        let submitted = self.inner.submit();
        self.send_unsent();
        submitted
    }

    fn wait(&mut self) -> io::Result<()> {
        // A caller that waits without submitting still gets its joins answered.
        self.send_unsent();
        if !self.only_remote_pending() {
            return self.inner.wait();
        }
        let held = self.inbox.done.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_empty() {
            // Bounded: the operations of the engine below that are not joined may complete
            // meanwhile, and the worker reaps them on its next pass.
            let _ = self
                .inbox
                .arrived
                .wait_timeout(held, Duration::from_millis(10));
        }
        Ok(())
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        self.send_unsent();
        if let Some(fd) = self.own_fd {
            let mut value = 0u64;
            // SAFETY: reads 8 bytes into a u64 from this engine's non-blocking eventfd.
            let _ = unsafe { libc::read(fd, (&raw mut value).cast(), 8) };
        }
        let mut reaped = std::mem::take(&mut self.reaped);
        self.inner.reap(&mut |tag, result| {
            if tag & JOINED == 0 {
                done(tag, result);
            } else {
                reaped.push((tag, result));
            }
        });
        for (tag, result) in reaped.drain(..) {
            let join = host_size(tag & !JOINED);
            if let Some(j) = self.joins.get_mut(join) {
                j.local = Some(result);
            }
            self.side_done(join);
        }
        self.reaped = reaped;
        if !self.joins.is_empty() {
            self.take_remote();
        }
        for (tag, result) in self.answers.drain(..) {
            done(tag, result);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd().or(self.own_fd)
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}

impl Drop for MirrorEngine {
    /// Waits for the disk's side of every join (the kernel reads their buffers); the
    /// destination's answers may still come, to an inbox no one reads.
    fn drop(&mut self) {
        self.send_unsent();
        while self.joins.values().any(|j| j.local.is_none()) {
            if self.inner.wait().is_err() {
                for join in self.joins.drain() {
                    std::mem::forget(join);
                }
                return;
            }
            let mut reaped = Vec::new();
            self.inner
                .reap(&mut |tag, result| reaped.push((tag, result)));
            for (tag, result) in reaped {
                if tag & JOINED != 0
                    && let Some(j) = self.joins.get_mut(host_size(tag & !JOINED))
                {
                    j.local = Some(result);
                }
            }
        }
        for join in self.joins.drain() {
            if let Some((offset, len)) = join.range {
                join.run.write_ends(offset, len);
            }
        }
    }
}
