//! The lock of an open file description (`F_OFD_SETLK`) over a whole file: what image locking
//! and the handover of an image between disks are built on.

use std::io;
use std::os::fd::AsRawFd;

/// Sets `kind` (`F_RDLCK`, `F_WRLCK`, `F_UNLCK`) on `fd`'s open file description, without
/// waiting.
pub(super) fn set_lock(fd: &impl AsRawFd, kind: libc::c_int) -> io::Result<()> {
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
