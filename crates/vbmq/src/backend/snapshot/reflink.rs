//! A snapshot by cloning the image (`FICLONE`), where the file system can.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `FICLONE` from <linux/fs.h>: `_IOW(0x94, 9, int)`.
pub const FICLONE: libc::c_ulong = 0x4004_9409;

/// Syncs `image` and clones it whole into `to`, cut to `capacity`; `false` where the file
/// system cannot clone (or not between these files): copy instead.
pub fn clone(image: &File, to: &File, capacity: u64) -> io::Result<bool> {
    image.sync_data()?;
    to.set_len(0)?;
    // SAFETY: FICLONE reads the source descriptor's number from its argument.
    let ret = unsafe { libc::ioctl(to.as_raw_fd(), FICLONE as _, image.as_raw_fd()) };
    if ret < 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EXDEV | libc::EINVAL | libc::ENOSYS) => {
                Ok(false)
            }
            _ => Err(error),
        };
    }
    if to.metadata()?.len() != capacity {
        to.set_len(capacity)?;
    }
    to.sync_data()?;
    Ok(true)
}
