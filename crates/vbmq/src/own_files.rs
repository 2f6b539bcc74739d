//! The files vbmq makes or opens beside an image or a socket (a thin disk's `DISK` and
//! `DISK.map`, `DISK.changes`, lock files, snapshot targets, `--state`): never through a
//! symbolic link, and only a regular file of the process's user with one link. Whoever can
//! write the directory can plant a link or a hard link there; a root vbmq would otherwise write
//! the file it leads to. One helper for all of them (SECURITY.md, "Files beside an image").

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Whether [`open`] may make the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Create {
    /// It must exist.
    No,
    /// Made (with the given mode) if missing.
    IfMissing(u32),
    /// Made (with the given mode); anything already there is refused (`O_EXCL`).
    New(u32),
}

/// How a file is opened: for reading, writing or both, made or not, with `O_DIRECT` or not.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// Opened for reading.
    pub read: bool,
    /// Opened for writing.
    pub write: bool,
    /// Whether it may be made.
    pub create: Create,
    /// With `O_DIRECT`.
    pub direct: bool,
}

impl Access {
    /// Read-write, made with `create`.
    pub fn read_write(create: Create) -> Self {
        Access {
            read: true,
            write: true,
            create,
            direct: false,
        }
    }

    /// Write-only, made with `create`: a lock file, which a confined vbmq may write but not
    /// read in a run-time socket's directory (Landlock).
    pub fn write_only(create: Create) -> Self {
        Access {
            read: false,
            ..Access::read_write(create)
        }
    }
}

/// Opens `path` as `access` says, without following a symbolic link at its last component and
/// without blocking on a FIFO, then checks it is a regular file of this process's effective
/// user with one link (see [`check`]). A file made here has `O_NONBLOCK` cleared again:
/// io_uring honours it on regular files.
pub fn open(path: &Path, access: Access) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(access.read).write(access.write);
    match access.create {
        Create::No => {}
        Create::IfMissing(mode) => {
            options.create(true).truncate(false).mode(mode);
        }
        Create::New(mode) => {
            options.create_new(true).mode(mode);
        }
    }
    let direct = if access.direct { libc::O_DIRECT } else { 0 };
    let file = options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | direct)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a symbolic link: vbmq does not follow links to the files it makes beside an image",
            ),
            _ => e,
        })?;
    check(&file)?;
    clear_nonblock(&file)?;
    Ok(file)
}

/// Refuses anything but a regular file of this process's effective user with one link (a
/// FIFO or device, someone else's file, a hard link to another file).
pub fn check(file: &File) -> io::Result<()> {
    let metadata = file.metadata()?;
    let why = if !metadata.is_file() {
        "not a regular file"
    } else if metadata.uid() != effective_uid() {
        "not owned by vbmq's user"
    } else if metadata.nlink() != 1 {
        "a file with more than one link (a hard link to another file?)"
    } else {
        return Ok(());
    };
    Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
}

/// Removes what a crash may have left at `path` (a temporary), a symbolic link itself and not
/// what it leads to (`unlink` never follows the last component); nothing there is no error.
pub fn remove_stale(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The process's effective user ID.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

fn clear_nonblock(file: &File) -> io::Result<()> {
    // SAFETY: fcntl F_GETFL/F_SETFL on a descriptor `file` owns; results are checked.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RW: Access = Access {
        read: true,
        write: true,
        create: Create::No,
        direct: false,
    };

    #[test]
    fn a_link_a_hard_link_or_a_fifo_is_refused_and_its_target_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        for create in [Create::No, Create::IfMissing(0o600), Create::New(0o600)] {
            let access = Access::read_write(create);
            assert!(open(&link, access).is_err(), "{create:?}");
        }
        let hard = dir.path().join("hard");
        std::fs::hard_link(&victim, &hard).unwrap();
        let e = open(&hard, RW).unwrap_err().to_string();
        assert!(e.contains("more than one link"), "{e}");
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        assert!(open(&fifo, RW).is_err(), "a FIFO, and without blocking");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }

    #[test]
    fn a_new_file_is_made_once_and_a_stale_link_is_removed_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.new");
        let file = open(&path, Access::read_write(Create::New(0o600))).unwrap();
        // SAFETY: F_GETFL on a descriptor `file` owns.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        assert_eq!(file.metadata().unwrap().mode() & 0o777, 0o600);
        assert!(open(&path, Access::read_write(Create::New(0o600))).is_err());
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        remove_stale(&path).unwrap();
        remove_stale(&path).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }
}
