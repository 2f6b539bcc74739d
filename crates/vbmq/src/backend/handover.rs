//! Images handed over between disks (`handover=on`): a live migration's source and
//! destination VM served the same image, in one vbmq process or in two (two hosts on shared
//! storage, or an old and a new process). Such a disk locks its image only while it may write:
//! the exclusive lock of its own open file description (`F_OFD_SETLK`), taken at its first
//! write and given back when its frontend stops its rings (QEMU does so on the source at the
//! switch-over) or goes away. Open file description locks conflict between descriptions, in one
//! process as across processes, so of the disks on one image one writes at a time; a write from
//! another meanwhile fails (IOERR), and two running VMs never both write.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ofd_lock::set_lock;

/// One `handover=on` disk's hold on its image.
#[derive(Debug)]
pub struct WriterSeat {
    /// The disk's open file description (a duplicate: the lock is the description's).
    fd: OwnedFd,
    /// This disk holds the write lock.
    writing: AtomicBool,
    /// Taken to change `writing`, off the data path's common case.
    turn: Mutex<()>,
}

impl WriterSeat {
    /// A seat for the disk open as `file`, holding nothing yet.
    pub fn new(file: &File) -> io::Result<Self> {
        Ok(WriterSeat {
            fd: file.as_fd().try_clone_to_owned()?,
            writing: AtomicBool::new(false),
            turn: Mutex::new(()),
        })
    }

    /// Whether this disk may write now: it holds the lock, or takes it because no one else
    /// holds it.
    pub fn may_write(&self) -> bool {
        if self.writing.load(Ordering::Acquire) {
            return true;
        }
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        if self.writing.load(Ordering::Acquire) {
            return true;
        }
        let taken = set_lock(&self.fd, libc::F_WRLCK).is_ok();
        self.writing.store(taken, Ordering::Release);
        taken
    }

    /// Gives the lock back (the frontend stopped its rings, or the disk goes).
    pub fn release(&self) {
        let _turn = self.turn.lock().unwrap_or_else(|p| p.into_inner());
        if self.writing.swap(false, Ordering::AcqRel) {
            let _ = set_lock(&self.fd, libc::F_UNLCK);
        }
    }
}
