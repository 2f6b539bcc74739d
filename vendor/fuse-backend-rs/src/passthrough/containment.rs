// SPDX-License-Identifier: Apache-2.0

//! Keeping requests inside the root directory when the host's tree changes under held inodes.
//!
//! The passthrough keeps an `O_PATH` descriptor for every inode the client looked up. When the
//! host moves a directory out of the root, the descriptor follows it: `..` from it, and any change
//! made through it or beneath it, would reach the host's files outside the root. With
//! [`Config::stay_in_root`](super::Config::stay_in_root), every request that names an inode by
//! node id (LOOKUP, the calls that create, remove, rename or link, SETATTR, the xattr calls, OPEN,
//! OPENDIR, READDIR, GETATTR and READLINK without a handle, STATFS, ACCESS) first checks that the
//! inode is still inside the root, and fails with `ENOENT` otherwise (as the kernel answers `..`
//! from a path that left its bind mount, which virtiofsd's mount-namespace sandbox relies on):
//!
//! - a directory: its real `..` chain is walked (`openat(fd, "..", O_PATH)`, `fstat`) until the
//!   root's `(st_dev, st_ino)`; reaching the process's `/` (whose `..` is itself) or more than
//!   [`MAX_DEPTH`] levels means it has left;
//! - another file: the directory of its current path (`/proc/self/fd/N`) must still hold the
//!   same inode under that name, and that directory must pass the walk. An unlinked file has no
//!   place anywhere and is let be.
//!
//! `..` is looked up only from a directory inside the root (the root's own `..` is the root), and
//! its result is walked again, so no request climbs above the root even while the host moves
//! directories. Reads and writes on open handles are not checked: they were opened inside.
//! The check costs two system calls per level between the inode and the root.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

use super::util::{openat, stat_fd};

/// The deepest a directory may lie below the root (a path of `PATH_MAX` bytes has fewer levels).
pub(super) const MAX_DEPTH: usize = 2048;

/// A file's identity on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DevIno {
    pub(super) dev: u64,
    pub(super) ino: u64,
}

impl DevIno {
    fn of(st: &libc::stat64) -> Self {
        DevIno {
            dev: st.st_dev,
            ino: st.st_ino,
        }
    }
}

/// What a request on an inode that has left the root gets.
pub(super) fn left_root() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOENT)
}

fn open_parent(dir: &impl AsRawFd) -> io::Result<File> {
    // Safe because this is a constant, NUL-terminated string.
    let dotdot = unsafe { CStr::from_bytes_with_nul_unchecked(b"..\0") };
    openat(
        dir,
        dotdot,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0,
    )
}

/// Whether directory `dir` lies at or below `root`: its `..` chain is walked up to it.
pub(super) fn dir_is_inside(dir: &impl AsRawFd, root: DevIno) -> io::Result<()> {
    let mut here = DevIno::of(&stat_fd(dir, None)?);
    let mut upper: Option<File> = None;
    for _ in 0..MAX_DEPTH {
        if here == root {
            return Ok(());
        }
        let parent = match &upper {
            Some(file) => open_parent(file),
            None => open_parent(dir),
        }
        .map_err(|_| left_root())?;
        let up = DevIno::of(&stat_fd(&parent, None)?);
        if up == here {
            // The process's `/`: the root is not above.
            return Err(left_root());
        }
        here = up;
        upper = Some(parent);
    }
    Err(left_root())
}

/// Whether the inode behind `file` (any type; `mode` its type) lies inside `root`.
pub(super) fn is_inside(
    file: &impl AsRawFd,
    mode: u32,
    proc_self_fd: &File,
    root: DevIno,
) -> io::Result<()> {
    if mode & libc::S_IFMT == libc::S_IFDIR {
        return dir_is_inside(file, root);
    }
    let st = stat_fd(file, None)?;
    if st.st_nlink == 0 {
        return Ok(());
    }
    let fd_name = CString::new(file.as_raw_fd().to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let path = super::PassthroughFs::<()>::readlinkat(proc_self_fd.as_raw_fd(), &fd_name)?;
    let path = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    // "/dir/name"; anything else ("(unreachable)/...", "name (deleted)" races) has left.
    let slash = match path.iter().rposition(|&b| b == b'/') {
        Some(slash) if path.first() == Some(&b'/') && slash + 1 < path.len() => slash,
        _ => return Err(left_root()),
    };
    let dir_path = CString::new(&path[..slash.max(1)]).map_err(|_| left_root())?;
    let name = CString::new(&path[slash + 1..]).map_err(|_| left_root())?;
    let dir = openat(
        &libc::AT_FDCWD,
        &dir_path,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )
    .map_err(|_| left_root())?;
    // The path is only a hint: the directory found must hold this very inode.
    match stat_fd(&dir, Some(&name)) {
        Ok(there) if DevIno::of(&there) == DevIno::of(&st) => dir_is_inside(&dir, root),
        _ => Err(left_root()),
    }
}
