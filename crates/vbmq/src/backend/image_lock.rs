//! Image locking, as QEMU locks its images: an open file description lock (`F_OFD_SETLK`) over
//! the whole file, shared for a read-only disk, exclusive for a writable one. Another process
//! that opens the image with a conflicting lock gets a clear error instead of a second writer.
//! Disks of one process on the same image share one lock: the first holder's, upgraded to
//! exclusive when a writable disk joins read-only ones. A second writable disk on an image is
//! refused, unless every writable disk on it says `handover=on`; those lock the image only
//! while they write (see [`super::handover`]).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::handover::WriterSeat;
use super::ofd_lock::set_lock;

/// An image is the same under any name: a block device by its device number, a file by inode.
type ImageId = (u64, u64);

struct Held {
    id: ImageId,
    /// The open file description that holds the lock (a duplicate, so it outlives the disk
    /// that took it).
    fd: OwnedFd,
    exclusive: bool,
    users: usize,
}

static HELD: Mutex<Vec<Held>> = Mutex::new(Vec::new());

/// The `handover=on` disks of the process, by image.
static HANDOVERS: Mutex<Vec<(ImageId, Weak<WriterSeat>)>> = Mutex::new(Vec::new());

/// One disk's share of its image's lock (released with the last share), or its seat among the
/// `handover=on` disks of the image.
#[derive(Debug)]
pub struct ImageLock {
    id: ImageId,
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
    pub fn take(file: &File, exclusive: bool) -> io::Result<Self> {
        let id = image_id(file)?;
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if exclusive && handing_over(id) {
            return Err(two_writers());
        }
        if let Some(entry) = held.iter_mut().find(|h| h.id == id) {
            if exclusive && entry.exclusive {
                return Err(two_writers());
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
            return Ok(ImageLock { id, seat: None });
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
        });
        Ok(ImageLock { id, seat: None })
    }

    /// A writable `handover=on` disk's seat (see [`super::handover`]): no lock until it writes.
    /// Refused if a writable disk of this process holds the image without `handover=on`.
    pub fn take_handover(file: &File) -> io::Result<Self> {
        let id = image_id(file)?;
        let held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if held.iter().any(|h| h.id == id && h.exclusive) {
            return Err(two_writers());
        }
        let seat = Arc::new(WriterSeat::new(file)?);
        let mut handovers = HANDOVERS.lock().unwrap_or_else(|p| p.into_inner());
        handovers.retain(|(_, seat)| seat.strong_count() > 0);
        handovers.push((id, Arc::downgrade(&seat)));
        Ok(ImageLock {
            id,
            seat: Some(seat),
        })
    }

    /// The disk's seat, for a `handover=on` disk.
    pub fn seat(&self) -> Option<Arc<WriterSeat>> {
        self.seat.clone()
    }
}

fn two_writers() -> io::Error {
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        "written by another disk of this process (handover=on on both, for a migration from one \
         to the other)",
    )
}

/// Whether a live `handover=on` disk of this process is on image `id`.
fn handing_over(id: ImageId) -> bool {
    HANDOVERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(image, seat)| *image == id && seat.strong_count() > 0)
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
    let handovers = HANDOVERS.lock().unwrap_or_else(|p| p.into_inner());
    for seat in handovers.iter().filter_map(|(_, seat)| seat.upgrade()) {
        seat.release();
    }
}

impl Drop for ImageLock {
    fn drop(&mut self) {
        if let Some(seat) = &self.seat {
            seat.release();
            return;
        }
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = held.iter().position(|h| h.id == self.id) {
            held[index].users -= 1;
            if held[index].users == 0 {
                // Unlocked now: closing this descriptor would not do it while the image's
                // io_uring rings, torn down later by the kernel, still hold the description.
                let _ = set_lock(&held[index].fd, libc::F_UNLCK);
                held.swap_remove(index);
            }
        }
    }
}
