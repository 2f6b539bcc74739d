//! A share's root as a detached mount of its directory, where the process may make one: the
//! kernel then keeps `..` inside the share (the mount's root is its own `..`, and `..` from a
//! directory the host moved out of it fails with `ENOENT` in the same call), a wall with no
//! window beneath the passthrough's per-request check (SECURITY.md, "What a share changes").

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;

use super::fds::{dev_ino, open_dir_at};

/// `open_tree(2)`: a clone of the mount tree at the path, attached nowhere.
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `open_tree(2)`: submounts beneath the path too, so the share serves what it served before.
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// Which wall a share's root gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RootWall {
    /// A detached mount: the kernel refuses `..` out of it.
    Mount,
    /// The directory itself (no `CAP_SYS_ADMIN`, or a kernel before 5.2): the check alone.
    Directory,
}

/// The directory `dir` (followed: the operator named it), as a detached mount of it where the
/// process may make one, else `O_PATH`. Before confinement (seccomp allows no `open_tree`).
pub fn open_share_root(dir: &Path) -> io::Result<(File, RootWall)> {
    use std::os::unix::fs::OpenOptionsExt;
    let plain = File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    match detached_mount(&plain) {
        Ok(mount) => Ok((mount, RootWall::Mount)),
        Err(e) => {
            tracing::debug!(
                "{}: no mount of its own ({e}): the check alone",
                dir.display()
            );
            Ok((plain, RootWall::Directory))
        }
    }
}

/// A detached mount of the directory open as `dir`, its root `dir` (needs `CAP_SYS_ADMIN` in
/// the mount namespace's owner: `vbmq ctl add-fs` makes one for a run-time share).
pub fn detached_mount(dir: &File) -> io::Result<File> {
    let flags = OPEN_TREE_CLONE
        | AT_RECURSIVE
        | libc::AT_EMPTY_PATH as libc::c_uint
        | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: open_tree reads the NUL-terminated empty path and returns a new descriptor or
    // -1, checked below.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, dir.as_raw_fd(), c"".as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Checks that `mount`, passed as the detached mount of the directory `dir` (both opened by
/// another process, `vbmq ctl add-fs`), is one: its root is `dir` itself, and its `..` is
/// its root (the kernel keeps `..` inside it), so that serving from it serves `dir` and no
/// more. `dir` is the descriptor every other check (beneath `--fs-root`) was made on.
pub fn check_passed_mount(dir: &File, mount: &File) -> io::Result<()> {
    let refused = |what: &str| io::Error::new(io::ErrorKind::InvalidInput, what.to_string());
    let root = dev_ino(mount)?;
    if root != dev_ino(dir)? {
        return Err(refused(
            "the mount passed is not a mount of the directory passed (another root)",
        ));
    }
    let parent = open_dir_at(mount, c"..", libc::O_PATH)?;
    if dev_ino(&parent)? != root {
        return Err(refused(
            "the mount passed is not a detached mount (its `..` leads out of it)",
        ));
    }
    Ok(())
}

/// Whether this thread may read the directory at the root of `mount`: Landlock's rules, made
/// at start, reach no mount made after it (its walk stops at a detached mount's root, beneath
/// no rule), so a confined vbmq cannot serve from a run-time share's mount and keeps its
/// directory instead.
pub fn mount_readable(mount: &File) -> io::Result<()> {
    open_dir_at(mount, c".", libc::O_RDONLY).map(drop)
}

impl RootWall {
    /// What the log says of it.
    pub fn describe(self) -> &'static str {
        match self {
            RootWall::Mount => "served from a mount of its own (the kernel keeps `..` inside)",
            RootWall::Directory => "served from its directory (no mount of its own)",
        }
    }
}
