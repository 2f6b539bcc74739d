//! The path the kernel gives a descriptor, for the share's log lines and a migration's
//! `find-paths` mode.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The path the kernel gives `file`'s descriptor (`readlinkat`: the confinement allows no
/// `readlink`).
pub fn fd_path(file: &File) -> io::Result<PathBuf> {
    let link = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`, which lives meanwhile.
    let len = unsafe {
        libc::readlinkat(
            libc::AT_FDCWD,
            link.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let len = usize::try_from(len).map_err(|_| io::Error::last_os_error())?;
    if len >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(len);
    Ok(PathBuf::from(std::ffi::OsString::from_vec(buf)))
}
