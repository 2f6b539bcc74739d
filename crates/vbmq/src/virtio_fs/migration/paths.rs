//! Inodes by path (virtiofsd's `find-paths` mode): the source names each held inode by the path
//! the kernel gives its descriptor, relative to the shared directory, and checks that the path
//! still leads to that inode; the destination opens each path beneath the shared directory with
//! `openat2`, the kernel refusing `..`, absolute links and any symbolic link on the way.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::format::{FileIdentity, MAX_HANDLE, check_path};
use crate::virtio_fs::fds::fd_path;

/// `struct open_how` of `openat2(2)` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Opens `relative` (checked by [`check_path`]) beneath `root`, `O_PATH`, following no
/// symbolic link (a link as the last name is opened itself, as a lookup holds it).
pub fn open_beneath(root: &File, relative: &[u8]) -> io::Result<File> {
    check_path(relative).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let path = CString::new(relative).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow {
        flags: u64::from((libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC).unsigned_abs()),
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid directory descriptor, a NUL-terminated path, and `how` of its size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &raw const how,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The path of `file` relative to `root_path` (where the shared directory `root` is now),
/// checked to lead from `root` to the very inode `file` is. The error names no host path: it
/// travels to the frontend in the share's state.
pub fn path_in_share(root_path: &Path, root: &File, file: &File) -> io::Result<Vec<u8>> {
    let link = fd_path(file)?;
    let moved = || io::Error::other("not in the share any more");
    let relative = link.strip_prefix(root_path).map_err(|_| moved())?;
    let relative = relative.as_os_str().as_bytes().to_vec();
    // A deleted file's link ends in " (deleted)": no such path leads to it.
    let found = open_beneath(root, &relative).map_err(|_| moved())?;
    if dev_ino(&found)? != dev_ino(file)? {
        return Err(moved());
    }
    Ok(relative)
}

fn dev_ino(file: &File) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// `file`'s identity: its file system's id and its handle; `None` when the file system has no
/// id or gives no handles.
pub fn identity(file: &File) -> Option<FileIdentity> {
    let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: the kernel writes the statvfs `vfs` points to; `file` is an open descriptor.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), vfs.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: fstatvfs succeeded and filled it.
    let vfs = unsafe { vfs.assume_init() };
    #[allow(clippy::useless_conversion)] // `c_ulong` is narrower on 32-bit targets.
    let fsid = u64::from(vfs.f_fsid);
    if fsid == 0 {
        return None;
    }
    /// `struct file_handle` with room for the largest handle.
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        data: [u8; MAX_HANDLE],
    }
    let mut handle = Handle {
        bytes: u32::try_from(MAX_HANDLE).unwrap_or(0),
        kind: 0,
        data: [0; MAX_HANDLE],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH names `file` itself; the kernel
    // writes at most `handle.bytes` bytes of handle and the mount id, both alive for the call.
    let done = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            file.as_raw_fd(),
            c"".as_ptr(),
            &raw mut handle,
            &raw mut mount_id,
            libc::AT_EMPTY_PATH,
        )
    };
    let len = usize::try_from(handle.bytes).ok()?;
    if done != 0 || len == 0 || len > MAX_HANDLE {
        return None;
    }
    Some(FileIdentity {
        fsid,
        handle_type: handle.kind,
        handle: handle.data.get(..len)?.to_vec(),
    })
}

/// Refuses `file` if `expected` is given, the file is on the file system `expected` names, and
/// it is another file: the path leads elsewhere than on the source. On another file system (a
/// copy on another host) the path is all there is to go by.
pub fn check_identity(file: &File, expected: Option<&FileIdentity>) -> io::Result<()> {
    let (Some(expected), Some(found)) = (expected, identity(file)) else {
        return Ok(());
    };
    if found.fsid == expected.fsid && found != *expected {
        return Err(io::Error::other(
            "the path leads to another file than on the source",
        ));
    }
    Ok(())
}
