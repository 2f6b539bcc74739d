//! Spare io_uring rings for file disks added at run time (`--run-time-rings`). A confined vbmq
//! cannot create a ring (`io_uring_setup` is refused after start), so `vbmq serve` creates these
//! before confinement, restricted as every queue's ring is, with four empty registered-file
//! slots. A run-time disk's queue takes one, fills the slots with its image's descriptors (and a
//! `base=` disk's base image's)
//! (`IORING_REGISTER_FILES_UPDATE`, the one register operation these rings accept) and gives it
//! back when its engine is dropped, drained; a ring that may still have operations in flight is
//! leaked, never reused.

use std::io;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use io_uring::{IoUring, opcode};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::OPS_PER_REQUEST_MAX;
use crate::confine::{RingPolicy, restrict_ring};

/// Operations a pooled ring has room for: the deepest queue's (`queue-size=1024`, twice that).
pub const POOLED_DEPTH: u32 = 2048;

/// `IORING_REGISTER_FILES_UPDATE` from <linux/io_uring.h>.
const REGISTER_FILES_UPDATE: u8 = 6;

/// Registered-file slots of a pooled ring: the `O_DIRECT` and the buffered descriptor, then a
/// base image's two (`base=`).
const SLOTS: usize = 4;
/// [`SLOTS`] as the kernel counts them.
const SLOTS_U32: u32 = 4;

/// A spare ring and the eventfd registered with it.
struct Spare {
    ring: IoUring,
    eventfd: EventFd,
}

static POOL: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

/// Raised before confinement: no ring can be made from then on.
static SEALED: AtomicBool = AtomicBool::new(false);

/// No ring may be made from now on (the process is about to be confined): an engine opened
/// later for any file disk (a writable export's, a mirror's copy) takes a spare ring or goes
/// without, as a run-time disk's queue does.
pub fn seal() {
    SEALED.store(true, Ordering::SeqCst);
}

/// Whether [`seal`] was called.
pub fn sealed() -> bool {
    SEALED.load(Ordering::SeqCst)
}

fn pool() -> std::sync::MutexGuard<'static, Vec<Spare>> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The default `--run-time-rings`: four per online CPU, at most 16.
pub fn default_count() -> usize {
    std::thread::available_parallelism().map_or(4, |n| (n.get() * 4).min(16))
}

fn spare() -> io::Result<Spare> {
    let mut builder = IoUring::builder();
    builder
        .setup_cqsize(POOLED_DEPTH * OPS_PER_REQUEST_MAX)
        .setup_clamp()
        .setup_r_disabled();
    let ring = builder.build(POOLED_DEPTH)?;
    ring.submitter().register_files_sparse(SLOTS_U32)?;
    let eventfd = EventFd::new(EFD_NONBLOCK)?;
    ring.submitter().register_eventfd(eventfd.as_raw_fd())?;
    let policy = RingPolicy {
        extra_ops: &[opcode::UringCmd16::CODE],
        register_ops: &[REGISTER_FILES_UPDATE],
        fixed_files_only: true,
    };
    restrict_ring(&ring.submitter(), &policy)?;
    Ok(Spare { ring, eventfd })
}

/// Adds `count` spare rings to the pool (before confinement).
pub fn fill(count: usize) -> io::Result<()> {
    let mut made = Vec::with_capacity(count);
    for _ in 0..count {
        made.push(spare()?);
    }
    pool().extend(made);
    Ok(())
}

/// Spare rings in the pool now.
pub fn available() -> usize {
    pool().len()
}

/// A ring taken from the pool, with `files` (at most four: the `O_DIRECT` and buffered
/// descriptors, then a base's) in its first registered-file slots; `None` when the pool is
/// empty.
pub fn take(files: &[RawFd]) -> Option<io::Result<PooledRing>> {
    if files.len() > SLOTS {
        return Some(Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "more files than a pooled ring's slots",
        )));
    }
    let spare = pool().pop()?;
    let mut slots = [-1; SLOTS];
    slots[..files.len()].copy_from_slice(files);
    if let Err(e) = spare.ring.submitter().register_files_update(0, &slots) {
        // Nothing was ever submitted on it: it goes back as it was.
        pool().push(spare);
        return Some(Err(e));
    }
    Some(Ok(PooledRing {
        spare: ManuallyDrop::new(spare),
        drained: false,
    }))
}

/// A pooled ring in use: back to the pool when dropped, if [`PooledRing::drained`] was called.
pub struct PooledRing {
    spare: ManuallyDrop<Spare>,
    drained: bool,
}

impl PooledRing {
    /// The eventfd the ring signals on completions.
    pub fn eventfd(&self) -> &EventFd {
        &self.spare.eventfd
    }

    /// Says that no operation is in flight on the ring: it may be reused once dropped.
    pub fn drained(&mut self) {
        self.drained = true;
    }
}

impl Deref for PooledRing {
    type Target = IoUring;
    fn deref(&self) -> &IoUring {
        &self.spare.ring
    }
}

impl DerefMut for PooledRing {
    fn deref_mut(&mut self) -> &mut IoUring {
        &mut self.spare.ring
    }
}

impl Drop for PooledRing {
    fn drop(&mut self) {
        // SAFETY: `spare` is taken once, here, and not touched again.
        let spare = unsafe { ManuallyDrop::take(&mut self.spare) };
        if !self.drained {
            // The kernel may still carry out its operations, into memory about to be freed.
            crate::limited!(
                error,
                "a run-time ring still has operations in flight: it is leaked, not reused"
            );
            std::mem::forget(spare);
            return;
        }
        // Empty slots: the image's descriptors are no longer held through the ring.
        match spare
            .ring
            .submitter()
            .register_files_update(0, &[-1; SLOTS])
        {
            Ok(_) => {
                // A stale count would only wake the next user once for nothing.
                let _ = spare.eventfd.read();
                pool().push(spare);
            }
            Err(e) => {
                crate::limited!(warn, "a run-time ring is not reused: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_returns_only_drained() {
        let before = available();
        fill(2).unwrap();
        assert_eq!(available(), before + 2);
        let file = tempfile::tempfile().unwrap();
        let fd = file.as_raw_fd();
        let mut ring = take(&[fd, fd]).unwrap().unwrap();
        assert_eq!(available(), before + 1);
        // Restricted: no register operation but the file slots' update.
        let mut page = vec![0u8; 4096];
        let iov = libc::iovec {
            iov_base: page.as_mut_ptr().cast(),
            iov_len: page.len(),
        };
        // SAFETY: `page` outlives the ring's use of it (the call is refused).
        assert!(unsafe { ring.submitter().register_buffers(&[iov]) }.is_err());
        assert!(ring.submitter().register_files_update(0, &[fd]).is_ok());
        ring.drained();
        drop(ring);
        assert_eq!(available(), before + 2);
        let ring = take(&[fd, fd, fd, fd]).unwrap().unwrap();
        drop(ring);
        assert_eq!(available(), before + 1, "an undrained ring came back");
    }
}
