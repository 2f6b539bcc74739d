//! What an open descriptor is, asked with the calls a confined vbmq may make: the path the
//! kernel gives it (the share's log lines, a migration's `find-paths` mode), its `(st_dev,
//! st_ino)`, and a directory opened relative to it (the `..` walks that check a share's root).

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
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

/// `(st_dev, st_ino)` of an open file.
pub fn dev_ino(file: &impl AsRawFd) -> io::Result<(u64, u64)> {
    // SAFETY: an all-zero stat is a valid value; fstat writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on an open descriptor into a local struct.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// The directory `name` relative to the open directory `dir` (`..`, `.`), opened with `flags`
/// (`O_DIRECTORY` and `O_CLOEXEC` added).
pub fn open_dir_at(dir: &impl AsRawFd, name: &CStr, flags: libc::c_int) -> io::Result<File> {
    // SAFETY: openat relative to an open directory, `name` NUL-terminated; the result is checked.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}
