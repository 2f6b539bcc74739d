//! The engine below a thin disk's queue: its ring, and for a base on an NBD export or in an
//! image format (qcow2) the reads of that base, which complete as the ring's do. A base read is
//! handed to the disk's fetcher (see [`NbdBase`]), or read at once through the image's reader
//! (see [`BaseImage`]), and its bytes come back through an inbox; the queue's thread copies
//! them into the operation's buffers when it reaps, so that nothing but the queue's thread
//! touches the guest's memory or the staging buffers, and wakes through the ring's completion
//! eventfd like any completion.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::base::BaseImage;
use super::nbd_base::{FetchDone, NbdBase};
use crate::backend::iovec::IovList;
use crate::backend::uring::UringEngine;
use crate::backend::{Engine, IoOp};

/// A piece of a base read answered: its operation's tag, where it goes in the operation's
/// buffers, its bytes or `-errno`.
type Answer = (u64, usize, Result<Vec<u8>, i32>);

/// The answers of the fetcher, from the client's thread to the queue's.
struct Inbox {
    done: Mutex<Vec<Answer>>,
    arrived: Condvar,
    /// A copy of the ring's completion eventfd, written on each answer to wake the worker.
    wake: Option<OwnedFd>,
}

impl Inbox {
    fn post(&self, tag: u64, at: usize, result: Result<Vec<u8>, i32>) {
        lock(&self.done).push((tag, at, result));
        self.arrived.notify_one();
        if let Some(fd) = &self.wake {
            let one = 1u64;
            // SAFETY: writes 8 bytes from a u64 to an eventfd; a full counter only means the
            // worker is being woken already.
            let _ = unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A base read sent to the fetcher, in as many pieces as the export's longest request makes.
struct Pending {
    iov: IovList,
    remaining: usize,
    error: i32,
}

/// A base read apart from the ring.
pub enum BaseSource {
    /// On the queue's thread, through the image's reader.
    Image(Arc<dyn BaseImage>),
    /// Through the export's fetcher.
    Nbd(Arc<NbdBase>),
}

/// The longest piece of a base read an image reads at once.
const IMAGE_PIECE: usize = 1 << 20;

impl BaseSource {
    /// The longest read sent at once.
    fn max_request(&self) -> usize {
        match self {
            BaseSource::Image(_) => IMAGE_PIECE,
            BaseSource::Nbd(nbd) => nbd.max_request() as usize,
        }
    }

    /// Reads `len` bytes at `offset`; `done` runs once, with exactly `len` bytes or `-errno`.
    fn fetch(&self, offset: u64, len: usize, done: FetchDone) {
        match self {
            BaseSource::Image(image) => {
                let mut buf = vec![0; len];
                let read = image.read_at(&mut buf, offset);
                done(read.map(|()| buf).map_err(|e| {
                    crate::limited!(warn, "thin disk: a read of its base image failed: {e}");
                    -e.raw_os_error().unwrap_or(libc::EIO)
                }));
            }
            // `len <= max_request`, a u32.
            BaseSource::Nbd(nbd) => nbd.fetch(offset, u32::try_from(len).unwrap_or(u32::MAX), done),
        }
    }
}

/// A queue's reads of a base apart from its ring.
struct RemoteReads {
    base: BaseSource,
    inbox: Arc<Inbox>,
    pending: HashMap<u64, Pending>,
}

/// A thin disk queue's ring, with the reads of an NBD or image base beside it.
pub struct ThinBelow {
    ring: UringEngine,
    remote: Option<RemoteReads>,
}

// SAFETY: the iovecs of the pending reads point into guest memory or the stage's staging
// buffers, valid until their operation is reaped (the `Engine::push` contract), and are
// written only on the queue's thread; the engine moves between threads only with its worker.
unsafe impl Send for ThinBelow {}

fn duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the ring keeps open; the result is checked.
    let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

impl ThinBelow {
    /// `ring`, reading the base from `remote` when the base is not a raw file.
    pub fn new(ring: UringEngine, remote: Option<BaseSource>) -> io::Result<Self> {
        let remote = match remote {
            Some(base) => {
                let wake = ring.completion_fd().map(duplicate).transpose()?;
                Some(RemoteReads {
                    base,
                    inbox: Arc::new(Inbox {
                        done: Mutex::new(Vec::new()),
                        arrived: Condvar::new(),
                        wake,
                    }),
                    pending: HashMap::new(),
                })
            }
            None => None,
        };
        Ok(ThinBelow { ring, remote })
    }

    /// Queues a read of the base; as [`Engine::push`] otherwise.
    pub fn push_base_read(&mut self, offset: u64, iov: IovList, tag: u64) -> io::Result<()> {
        let Some(remote) = &mut self.remote else {
            return self.ring.push_base_read(offset, iov, tag);
        };
        let len = iov.len();
        if len == 0 {
            remote.inbox.post(tag, 0, Ok(Vec::new()));
            remote.pending.insert(
                tag,
                Pending {
                    iov,
                    remaining: 1,
                    error: 0,
                },
            );
            return Ok(());
        }
        let piece = remote.base.max_request();
        remote.pending.insert(
            tag,
            Pending {
                iov,
                remaining: len.div_ceil(piece),
                error: 0,
            },
        );
        for at in (0..len).step_by(piece) {
            let n = piece.min(len - at);
            let inbox = remote.inbox.clone();
            remote.base.fetch(
                offset + at as u64,
                n,
                Box::new(move |result| inbox.post(tag, at, result)),
            );
        }
        Ok(())
    }

    /// The ring.
    pub fn ring(&self) -> &UringEngine {
        &self.ring
    }

    /// Completes the base reads the fetcher answered.
    fn reap_remote(&mut self, done: &mut dyn FnMut(u64, i32)) {
        let Some(remote) = &mut self.remote else {
            return;
        };
        if remote.pending.is_empty() {
            return;
        }
        let arrived = std::mem::take(&mut *lock(&remote.inbox.done));
        for (tag, at, result) in arrived {
            let Some(p) = remote.pending.get_mut(&tag) else {
                continue;
            };
            match result {
                Ok(data) if at + data.len() <= p.iov.len() => {
                    // SAFETY: `[at, at + len)` lies inside the operation's buffers (checked),
                    // which stay valid until it is answered below; the data is ours.
                    unsafe { p.iov.copy_in(at, data.as_ptr(), data.len()) };
                }
                Ok(_) => p.error = -libc::EIO,
                Err(errno) => p.error = errno,
            }
            p.remaining -= 1;
            if p.remaining == 0
                && let Some(p) = remote.pending.remove(&tag)
            {
                let total = i32::try_from(p.iov.len()).unwrap_or(i32::MAX);
                done(tag, if p.error != 0 { p.error } else { total });
            }
        }
    }
}

impl Engine for ThinBelow {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        self.ring.push(op, tag)
    }

    fn submit(&mut self) -> io::Result<()> {
        self.ring.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        let Some(remote) = &self.remote else {
            return self.ring.wait();
        };
        if remote.pending.is_empty() {
            return self.ring.wait();
        }
        // The ring's completions and the fetcher's cannot be waited for together: the
        // fetcher's are waited for, a while, and the worker reaps both after.
        let held = lock(&remote.inbox.done);
        if held.is_empty() {
            let _ = remote
                .inbox
                .arrived
                .wait_timeout(held, Duration::from_millis(1));
        }
        self.ring.submit()
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        self.ring.reap(done);
        self.reap_remote(done);
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.ring.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.ring.guest_memory(regions) }
    }
}
