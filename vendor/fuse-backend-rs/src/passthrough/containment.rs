// SPDX-License-Identifier: Apache-2.0

//! Keeping requests inside the root directory when the host's tree changes under held inodes.
//!
//! The passthrough keeps an `O_PATH` descriptor for every inode the client looked up. When the
//! host moves a directory out of the root, the descriptor follows it: `..` from it, and any change
//! made through it or beneath it, would reach the host's files outside the root. With
//! [`Config::stay_in_root`](super::Config::stay_in_root), every request that reaches another
//! file from an inode or changes one (LOOKUP, the calls that create, remove, rename or link,
//! SETATTR, SETXATTR, REMOVEXATTR, OPEN, OPENDIR, READDIR) first checks that the inode is still
//! inside the root, and fails with `ENOENT` otherwise (as the kernel answers `..` from a path
//! that left its bind mount, which virtiofsd's mount-namespace sandbox relies on). A held inode
//! still answers for itself (GETATTR, READLINK, STATFS, ACCESS, GETXATTR, LISTXATTR), as
//! virtiofsd's do: that reaches no other file, and keeps the common GETATTR at one system call.
//! The check:
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
//!
//! When the root is a detached mount of the directory (`open_tree(OPEN_TREE_CLONE)`, made by the
//! embedder; found at import by its `..` being itself), the kernel keeps `..` inside: `follow_dotdot`
//! stays at the mount's root, and `..` from a directory that left the mount's tree fails with
//! `ENOENT` (`path_connected`), in the same system call. A directory's check is then that one
//! call (`fstatat(dir, "..")`), `..` is the kernel's, and a file's current path is relative to the
//! mount (`/` once it left). The kernel does not stop lookups of children beneath a directory
//! that left, nor changes through a held file that left: the check still runs for those.
//!
//! Most inodes are inside, so a fast test comes first, four system calls whatever the depth: the
//! inode's current path (`/proc/self/fd/N`) less the root's (as opened; read again only if the
//! host moved the root) is opened beneath the root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, and must lead to the very same inode (the
//! path is only a hint; the kernel keeps the resolution beneath the root). Only when it does not
//! (the inode left, was unlinked, a rename raced, no `openat2` before Linux 5.6) is the walk above
//! done, at two system calls per level.

use std::convert::TryFrom;
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

/// Whether `root` (a directory, `st` its status) is the root of a mount of its own that keeps
/// `..` inside: a detached mount's root (or the process's `/`), whose `..` is itself.
pub(super) fn is_own_mount(root: &impl AsRawFd, st: &libc::stat64) -> bool {
    open_parent(root)
        .and_then(|parent| stat_fd(&parent, None))
        .is_ok_and(|up| DevIno::of(&up) == DevIno::of(st))
}

/// On the root's own mount: whether directory `dir` is still in the mount's tree. The kernel
/// answers `..` with `ENOENT` once it left (or was removed); the root's `..` is the root.
pub(super) fn dir_is_connected(dir: &impl AsRawFd) -> io::Result<()> {
    // Safe because this is a constant, NUL-terminated string.
    let dotdot = unsafe { CStr::from_bytes_with_nul_unchecked(b"..\0") };
    stat_fd(dir, Some(dotdot)).map(drop).map_err(|_| left_root())
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

/// `struct open_how` of `openat2(2)` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn fd_path(fd: &impl AsRawFd, proc_self_fd: &File) -> io::Result<Vec<u8>> {
    let fd_name = CString::new(fd.as_raw_fd().to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let path = super::PassthroughFs::<()>::readlinkat(proc_self_fd.as_raw_fd(), &fd_name)?;
    Ok(std::os::unix::ffi::OsStringExt::into_vec(
        path.into_os_string(),
    ))
}

/// `path` less `root_path` and its slash: the path relative to the root, if under it.
fn relative<'a>(path: &'a [u8], root_path: &[u8]) -> Option<&'a [u8]> {
    match path.strip_prefix(root_path) {
        Some([b'/', rel @ ..]) if !rel.is_empty() => Some(rel),
        // The root's path is "/" when the root is the process's root.
        _ if root_path == b"/" && path.len() > 1 => Some(&path[1..]),
        _ => None,
    }
}

/// Whether `rel`, taken beneath `root_file` without following any symlink, is inode `id`.
fn opens_beneath_as(rel: &[u8], id: DevIno, root_file: &impl AsRawFd) -> bool {
    let Ok(rel) = CString::new(rel) else {
        return false;
    };
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // Safe because the kernel reads the NUL-terminated path and `how`, of the size given, and we
    // check the return value (a new descriptor, owned below).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root_file.as_raw_fd(),
            rel.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    if fd < 0 {
        return false;
    }
    // Safe because the descriptor was just opened and is owned by nothing else.
    let found = unsafe { <File as std::os::unix::io::FromRawFd>::from_raw_fd(fd) };
    stat_fd(&found, None).map_or(false, |there| DevIno::of(&there) == id)
}

/// The fast test: `file`'s current path, taken beneath `root_file` without following any
/// symlink, leads to `file`'s very inode, `id`. `root_hint` is the root's path as it was
/// opened; only if it no longer prefixes the file's path is the root's current path read.
/// Either path is only a hint: the kernel keeps the resolution beneath the root.
fn found_beneath(
    file: &impl AsRawFd,
    id: DevIno,
    root_file: &impl AsRawFd,
    root_hint: &[u8],
    proc_self_fd: &File,
) -> bool {
    let Ok(path) = fd_path(file, proc_self_fd) else {
        return false;
    };
    if let Some(rel) = relative(&path, root_hint) {
        if opens_beneath_as(rel, id, root_file) {
            return true;
        }
    }
    let Ok(root_path) = fd_path(root_file, proc_self_fd) else {
        return false;
    };
    root_path != root_hint
        && relative(&path, &root_path).is_some_and(|rel| opens_beneath_as(rel, id, root_file))
}

/// The root an inode is checked against.
pub(super) struct Root<'a, F: AsRawFd> {
    /// The root, open.
    pub(super) file: &'a F,
    /// Its identity.
    pub(super) id: DevIno,
    /// Its path as it was opened (`/` for a mount of its own).
    pub(super) hint: &'a [u8],
    /// Whether it is a mount of its own (see [`is_own_mount`]).
    pub(super) is_mount: bool,
}

/// Whether the inode `id` behind `file` (any type; `mode` its type) lies inside `root`.
pub(super) fn is_inside(
    file: &impl AsRawFd,
    id: DevIno,
    mode: u32,
    proc_self_fd: &File,
    root: &Root<'_, impl AsRawFd>,
) -> io::Result<()> {
    let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
    if root.is_mount && is_dir {
        return dir_is_connected(file);
    }
    if found_beneath(file, id, root.file, root.hint, proc_self_fd) {
        return Ok(());
    }
    if is_dir {
        return dir_is_inside(file, root.id);
    }
    let st = stat_fd(file, None)?;
    if st.st_nlink == 0 {
        return Ok(());
    }
    if root.is_mount {
        // The path is relative to the mount, `/` once the file left it; one more try, for a
        // rename inside the root between reading the path and opening it.
        return match found_beneath(file, id, root.file, root.hint, proc_self_fd) {
            true => Ok(()),
            false => Err(left_root()),
        };
    }
    let path = fd_path(file, proc_self_fd)?;
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
        Ok(there) if DevIno::of(&there) == DevIno::of(&st) => dir_is_inside(&dir, root.id),
        _ => Err(left_root()),
    }
}
