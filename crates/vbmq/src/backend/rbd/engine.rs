//! A queue's engine over the disk's one image handle: operations go to librbd from the queue's
//! thread, and librbd's completion callback hands each one back to that queue alone, through
//! the queue's own inbox and eventfd. The queue's thread then reads results and publishes used
//! entries itself: librbd's threads never touch a virtqueue.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};

use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::Image;
use super::ffi::{self, Completion};
use crate::backend::{Engine, EngineOptions, IoOp};

/// `RBD_WRITE_ZEROES_FLAG_THICK_PROVISION`: zero without deallocating.
const WRITE_ZEROES_THICK: c_int = 1;

/// Completions of one queue, filled by librbd's callback thread, drained by the queue's.
struct Inbox {
    done: Mutex<Vec<usize>>,
    event: EventFd,
}

impl Inbox {
    fn done(&self) -> MutexGuard<'_, Vec<usize>> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// librbd's completion callback: queues the completion for its queue and wakes that queue.
///
/// # Safety
/// `arg` is a pointer from `Arc::into_raw` of the submitting engine's inbox, given once per
/// completion; this call takes that reference back.
unsafe extern "C" fn on_complete(c: Completion, arg: *mut c_void) {
    // SAFETY: per this function's contract, `arg` owns one reference to an `Inbox`.
    let inbox = unsafe { Arc::from_raw(arg.cast_const().cast::<Inbox>()) };
    inbox.done().push(c as usize);
    // A full eventfd counter only means the queue is already being woken.
    let _ = inbox.event.write(1);
}

/// An operation librbd has, and how its success is reported.
#[derive(Clone, Copy)]
struct InFlight {
    tag: u64,
    success: Success,
}

/// What librbd's non-negative return value means for the worker, which expects bytes for reads
/// and writes and 0 for the rest.
#[derive(Clone, Copy)]
enum Success {
    /// A read: librbd returns the bytes read.
    Bytes,
    /// A write: librbd returns 0; the worker expects this many bytes.
    Written(i32),
    /// Flush, discard, write-zeroes: 0.
    Zero,
}

/// One queue's engine on an RBD image.
pub struct RbdEngine {
    image: Arc<Image>,
    inbox: Arc<Inbox>,
    in_flight: HashMap<usize, InFlight>,
    /// Results known at push time (librbd refused the operation, or it moves no data), for
    /// the next reap.
    immediate: Vec<(u64, i32)>,
    /// The inbox's previous contents, kept to swap with it without allocating.
    spare: Vec<usize>,
    notify: bool,
}

impl RbdEngine {
    pub(super) fn new(image: Arc<Image>, options: EngineOptions) -> io::Result<Self> {
        let depth = options.depth as usize;
        Ok(RbdEngine {
            image,
            inbox: Arc::new(Inbox {
                done: Mutex::new(Vec::with_capacity(depth)),
                event: EventFd::new(EFD_NONBLOCK)?,
            }),
            in_flight: HashMap::with_capacity(depth),
            immediate: Vec::new(),
            spare: Vec::with_capacity(depth),
            notify: options.notify,
        })
    }

    /// Hands `op` to librbd with completion `c`; returns librbd's status.
    fn start(&self, op: IoOp, c: Completion) -> c_int {
        let (api, image) = (self.image.api, self.image.handle());
        if image.is_null() {
            return -libc::ESHUTDOWN;
        }
        // SAFETY: `image` is open for the engine's life; the iovecs stay valid until the
        // completion is reaped (Engine::push's contract); `c` is a fresh completion.
        unsafe {
            match op {
                IoOp::Read { offset, iov } => {
                    let count = c_int::try_from(iov.count()).unwrap_or(c_int::MAX);
                    (api.rbd_aio_readv)(image, iov.as_ptr(), count, offset, c)
                }
                IoOp::Write { offset, iov } => {
                    let count = c_int::try_from(iov.count()).unwrap_or(c_int::MAX);
                    (api.rbd_aio_writev)(image, iov.as_ptr(), count, offset, c)
                }
                IoOp::Flush => (api.rbd_aio_flush)(image, c),
                // A discard must read back as zeros; rbd_aio_discard skips the parts of a range
                // not aligned to `rbd_discard_granularity_bytes` (64 KiB), while write-zeroes
                // without THICK deallocates what it can and zeroes the rest.
                IoOp::Discard { offset, len } => self.write_zeroes(image, offset, len, 0, c),
                IoOp::WriteZeroes { offset, len, unmap } => {
                    let flags = if unmap { 0 } else { WRITE_ZEROES_THICK };
                    self.write_zeroes(image, offset, len, flags, c)
                }
            }
        }
    }
}

impl RbdEngine {
    fn write_zeroes(
        &self,
        image: ffi::Image,
        offset: u64,
        len: u64,
        flags: c_int,
        c: Completion,
    ) -> c_int {
        let Ok(len) = usize::try_from(len) else {
            return -libc::EINVAL;
        };
        // SAFETY: as in `start`; no buffer is passed.
        unsafe { (self.image.api.rbd_aio_write_zeroes)(image, offset, len, c, flags, 0) }
    }
}

impl Engine for RbdEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        // librbd refuses an empty vector (EINVAL); with no buffer there is nothing to move.
        if let IoOp::Read { iov, .. } | IoOp::Write { iov, .. } = op
            && iov.is_empty()
        {
            self.immediate.push((tag, 0));
            return Ok(());
        }
        let api = self.image.api;
        let arg = Arc::into_raw(Arc::clone(&self.inbox))
            .cast_mut()
            .cast::<c_void>();
        let mut c: Completion = std::ptr::null_mut();
        // SAFETY: `arg` carries one inbox reference, which `on_complete` takes back.
        let ret = unsafe { (api.rbd_aio_create_completion)(arg, on_complete, &mut c) };
        if ret < 0 {
            // SAFETY: no completion holds `arg`: take its reference back.
            drop(unsafe { Arc::from_raw(arg.cast_const().cast::<Inbox>()) });
            return Err(io::Error::from_raw_os_error(-ret));
        }
        let ret = self.start(op, c);
        if ret < 0 {
            // SAFETY: librbd refused the operation, so the completion never fires: release it
            // and its inbox reference here.
            unsafe {
                (api.rbd_aio_release)(c);
                drop(Arc::from_raw(arg.cast_const().cast::<Inbox>()));
            }
            self.image.log_failure(ret);
            self.immediate.push((tag, ret));
            return Ok(());
        }
        let success = match op {
            IoOp::Read { .. } => Success::Bytes,
            IoOp::Write { iov, .. } => {
                Success::Written(i32::try_from(iov.len()).unwrap_or(i32::MAX))
            }
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => Success::Zero,
        };
        self.in_flight.insert(c as usize, InFlight { tag, success });
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        // librbd starts each operation when it is pushed.
        Ok(())
    }

    fn wait(&mut self) -> io::Result<()> {
        loop {
            if !self.immediate.is_empty() || !self.inbox.done().is_empty() {
                return Ok(());
            }
            let mut fd = libc::pollfd {
                fd: self.inbox.event.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ret = unsafe { libc::poll(&mut fd, 1, -1) };
            if ret < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINTR) {
                    return Err(e);
                }
            }
            let _ = self.inbox.event.read();
        }
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for (tag, result) in self.immediate.drain(..) {
            done(tag, result);
        }
        std::mem::swap(&mut *self.inbox.done(), &mut self.spare);
        let api = self.image.api;
        for c in self.spare.drain(..) {
            let completion = c as Completion;
            // SAFETY: a completion librbd handed to `on_complete`, released exactly once here.
            let ret = unsafe {
                let ret = (api.rbd_aio_get_return_value)(completion);
                (api.rbd_aio_release)(completion);
                ret
            };
            let Some(op) = self.in_flight.remove(&c) else {
                continue;
            };
            let result = if ret < 0 {
                let ret = i32::try_from(ret).unwrap_or(-libc::EIO);
                self.image.log_failure(ret);
                ret
            } else {
                match op.success {
                    Success::Bytes => i32::try_from(ret).unwrap_or(i32::MAX),
                    Success::Written(bytes) => bytes,
                    Success::Zero => 0,
                }
            };
            done(op.tag, result);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.notify.then(|| self.inbox.event.as_raw_fd())
    }
}

impl Drop for RbdEngine {
    /// Waits for what is still in flight: librbd would otherwise write into buffers the queue
    /// no longer owns. librbd's operation timeout bounds the wait.
    fn drop(&mut self) {
        while !self.in_flight.is_empty() {
            if self.wait().is_err() {
                break;
            }
            self.reap(&mut |_, _| {});
        }
    }
}
