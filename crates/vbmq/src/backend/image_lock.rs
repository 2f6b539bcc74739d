//! Image locking, as QEMU locks its images: an open file description lock (`F_OFD_SETLK`) over
//! the whole file, shared for a read-only disk, exclusive for a writable one. Another process
//! that opens the image with a conflicting lock gets a clear error instead of a second writer.
//! Disks of one process on the same image share one lock: the first holder's, upgraded to
//! exclusive when a writable disk joins read-only ones. Two writable disks of one process on
//! one image are refused unless both say `handover=on` (a live migration on one host, the
//! source VM on one socket and the destination on another): they then share a
//! [`WriterToken`], which lets one of them write at a time.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An image is the same under any name: a block device by its device number, a file by inode.
type ImageId = (u64, u64);

struct Held {
    id: ImageId,
    /// The open file description that holds the lock (a duplicate, so it outlives the disk
    /// that took it).
    fd: OwnedFd,
    exclusive: bool,
    users: usize,
    /// Writable disks among the users.
    writers: usize,
    /// Every writable user asked for `handover=on`.
    handover: bool,
    token: Arc<WriterToken>,
}

/// Which of the `handover=on` disks of one image may write: the first to write while no other
/// holds it, until its frontend stops its rings (the source VM at the end of a migration).
#[derive(Debug, Default)]
pub struct WriterToken {
    /// The holder's seat number; 0: free.
    owner: AtomicU64,
}

/// One disk's place at a [`WriterToken`].
#[derive(Debug)]
pub struct WriterSeat {
    token: Arc<WriterToken>,
    id: u64,
}

impl WriterSeat {
    fn new(token: Arc<WriterToken>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        WriterSeat {
            token,
            id: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Whether this disk may write now; takes the token if it is free.
    pub fn may_write(&self) -> bool {
        let owner = self.token.owner.load(Ordering::Acquire);
        owner == self.id
            || (owner == 0
                && self
                    .token
                    .owner
                    .compare_exchange(0, self.id, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok())
    }

    /// Gives the token back, if this disk holds it (its frontend stopped its rings).
    pub fn release(&self) {
        let _ = self
            .token
            .owner
            .compare_exchange(self.id, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

/// One disk's share of its image's lock; released with the last share.
#[derive(Debug)]
pub struct ImageLock {
    id: ImageId,
    writer: bool,
    /// Shared with the other `handover=on` writers of the image.
    seat: Option<Arc<WriterSeat>>,
}

fn image_id(file: &File) -> io::Result<ImageId> {
    let metadata = file.metadata()?;
    Ok(if metadata.file_type().is_block_device() {
        (u64::MAX, metadata.rdev())
    } else {
        (metadata.dev(), metadata.ino())
    })
}

/// How long a conflicting lock is waited for: a process that has just exited keeps its lock
/// until the kernel has torn down its io_uring rings, which hold the image's file (a restart
/// right after a stop would otherwise fail).
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// [`set_lock`], retried while another holder is in the way, for up to [`LOCK_WAIT`].
fn set_lock_waiting(fd: &impl AsRawFd, kind: libc::c_int) -> io::Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match set_lock(fd, kind) {
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES))
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result,
        }
    }
}

fn set_lock(fd: &impl AsRawFd, kind: libc::c_int) -> io::Result<()> {
    // SAFETY: an all-zero flock is a valid value; the fields that matter are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    #[allow(clippy::cast_possible_truncation)] // F_RDLCK, F_WRLCK, F_UNLCK, SEEK_SET: 0..=2
    {
        lock.l_type = kind as i16;
        lock.l_whence = libc::SEEK_SET as i16;
    }
    // l_start = l_len = 0: the whole file, however it grows.
    // SAFETY: F_OFD_SETLK reads the flock we pass; the descriptor is open.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_OFD_SETLK, &lock) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn conflict(error: io::Error, exclusive: bool) -> io::Error {
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => io::Error::new(
            io::ErrorKind::ResourceBusy,
            if exclusive {
                "in use by another process (lock=off to share it anyway)"
            } else {
                "written by another process (lock=off to share it anyway)"
            },
        ),
        _ => error,
    }
}

impl ImageLock {
    /// Locks the image open as `file` (opened for writing if `exclusive`): shared for a
    /// read-only disk, exclusive for a writable one.
    pub fn take(file: &File, exclusive: bool, handover: bool) -> io::Result<Self> {
        let id = image_id(file)?;
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = held.iter_mut().find(|h| h.id == id) {
            if exclusive && entry.writers > 0 && !(handover && entry.handover) {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    "written by another disk of this process (handover=on on both, for a \
                     migration from one to the other)",
                ));
            }
            if exclusive && !entry.exclusive {
                // Upgrade through this disk's writable description: the shared lock of our
                // own other description would conflict with it, so it goes first.
                set_lock(&entry.fd, libc::F_UNLCK)?;
                if let Err(e) = set_lock_waiting(file, libc::F_WRLCK) {
                    let _ = set_lock(&entry.fd, libc::F_RDLCK);
                    return Err(conflict(e, true));
                }
                entry.fd = file.as_fd().try_clone_to_owned()?;
                entry.exclusive = true;
            }
            entry.users += 1;
            if exclusive {
                entry.handover = handover && (entry.writers == 0 || entry.handover);
                entry.writers += 1;
            }
            let seat =
                (exclusive && handover).then(|| Arc::new(WriterSeat::new(entry.token.clone())));
            return Ok(ImageLock {
                id,
                writer: exclusive,
                seat,
            });
        }
        let kind = if exclusive {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        set_lock_waiting(file, kind).map_err(|e| conflict(e, exclusive))?;
        held.push(Held {
            id,
            fd: file.as_fd().try_clone_to_owned()?,
            exclusive,
            users: 1,
            writers: usize::from(exclusive),
            handover: exclusive && handover,
            token: Arc::default(),
        });
        let seat = held
            .last()
            .filter(|_| exclusive && handover)
            .map(|entry| Arc::new(WriterSeat::new(entry.token.clone())));
        Ok(ImageLock {
            id,
            writer: exclusive,
            seat,
        })
    }

    /// This disk's seat at the image's writer token (`handover=on` only).
    pub fn seat(&self) -> Option<Arc<WriterSeat>> {
        self.seat.clone()
    }
}

/// Releases every image lock of the process at once, for a clean exit. Left to the kernel, a
/// lock goes with the last descriptor of its open file description, and the io_uring rings that
/// hold the image are torn down only some time after the process has exited: QEMU started right
/// after vbmq stops would find the image still locked.
pub fn release_all() {
    let held = HELD.lock().unwrap_or_else(|p| p.into_inner());
    for entry in held.iter() {
        let _ = set_lock(&entry.fd, libc::F_UNLCK);
    }
}

impl Drop for ImageLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = held.iter().position(|h| h.id == self.id) {
            held[index].users -= 1;
            if self.writer {
                held[index].writers -= 1;
            }
            if let Some(seat) = &self.seat {
                seat.release();
            }
            if held[index].users == 0 {
                // Unlocked now: closing this descriptor would not do it while the image's
                // io_uring rings, torn down later by the kernel, still hold the description.
                let _ = set_lock(&held[index].fd, libc::F_UNLCK);
                held.swap_remove(index);
            }
        }
    }
}
