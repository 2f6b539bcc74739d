//! The files vbmq makes beside its sockets, made so that no one else can use them first.
//!
//! A listening socket is born owner-only: Linux gives a socket file the mode of the socket's
//! own inode at `bind` (less the umask), and `fchmod` on the unbound socket sets that mode. It
//! is bound under a temporary name, given its group and mode through an `O_PATH` descriptor of
//! that very file, then renamed into place. A lock file is created `0600` and never through a
//! symlink. The process umask is never changed: it is shared by every thread, so changing it
//! around a bind would widen the files other threads create at that moment.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::own_files::{self, Access, Create};

/// The listen backlog of every socket (as std's `UnixListener::bind`).
const BACKLOG: libc::c_int = 128;

/// Binds a listening socket at `path` (replacing what is there: the caller holds its lock or
/// checked that no vbmq serves it) with permission bits `mode` and, if given, group `group`.
/// Before it has both, only vbmq's user can connect to it, and it is not yet at `path`.
pub fn bind_listener(path: &Path, mode: u32, group: Option<u32>) -> io::Result<UnixListener> {
    let temp = temp_path(path);
    // Left by an earlier process with this pid, if anything (unlink does not follow a symlink).
    let _ = std::fs::remove_file(&temp);
    let listener = bind_owner_only(&temp, mode)?;
    let placed = set_group_and_mode(&temp, mode, group).and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    Ok(listener)
}

/// `PATH.PID.tmp`, beside `path`.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.tmp", std::process::id()));
    PathBuf::from(name)
}

/// A listening socket bound at `path`, whose file has `mode`'s owner bits and nothing more.
fn bind_owner_only(path: &Path, mode: u32) -> io::Result<UnixListener> {
    let (address, length) = socket_address(path)?;
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fchmod on a descriptor we own.
    check(unsafe { libc::fchmod(socket.as_raw_fd(), mode & 0o700) })?;
    // SAFETY: `address` is a sockaddr_un of at least `length` bytes.
    check(unsafe { libc::bind(socket.as_raw_fd(), (&raw const address).cast(), length) })?;
    let listener = UnixListener::from(socket);
    // SAFETY: listen on a bound socket we own.
    if let Err(e) = check(unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) }) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(listener)
}

fn socket_address(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    #[allow(clippy::cast_possible_truncation)] // AF_UNIX is 1
    {
        address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    }
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.contains(&0) || bytes.len() >= address.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: a socket path is at most {} bytes (with vbmq's temporary suffix)",
                path.display(),
                address.sun_path.len() - 1
            ),
        ));
    }
    for (to, &from) in address.sun_path.iter_mut().zip(bytes) {
        *to = libc::c_char::from_ne_bytes([from]);
    }
    let length = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    let length = libc::socklen_t::try_from(length).map_err(|_| io::ErrorKind::InvalidInput)?;
    Ok((address, length))
}

/// Gives the socket file at `path`, the one vbmq has just bound, its group and mode through a
/// descriptor of the file itself: a symlink put there instead is refused, never followed.
fn set_group_and_mode(path: &Path, mode: u32, group: Option<u32>) -> io::Result<()> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.file_type().is_socket() || metadata.uid() != own_files::effective_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not the socket vbmq bound", path.display()),
        ));
    }
    if let Some(gid) = group {
        // SAFETY: fchownat with AT_EMPTY_PATH changes the file `file` refers to; the empty path
        // is NUL-terminated; uid -1 leaves the owner.
        check(unsafe {
            libc::fchownat(
                file.as_raw_fd(),
                c"".as_ptr(),
                libc::uid_t::MAX,
                gid,
                libc::AT_EMPTY_PATH,
            )
        })?;
    }
    if metadata.mode() & 0o7777 != mode {
        // An O_PATH descriptor has no fchmod: its /proc link reaches exactly its file.
        let by_descriptor = format!("/proc/self/fd/{}", file.as_raw_fd());
        std::fs::set_permissions(by_descriptor, Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// Opens the lock file at `path` for writing, created `0600` if missing. A symlink there is
/// refused, not followed; so is anything but a regular file of vbmq's user with one link (a
/// FIFO, someone else's file, a hard link to another file). A lock file an older vbmq left
/// readable by others is made `0600`: whoever can open it can hold its lock.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    let file = own_files::open(path, Access::write_only(Create::IfMissing(0o600)))
        .map_err(|e| io::Error::new(e.kind(), format!("not a lock file of vbmq's: {e}")))?;
    if file.metadata()?.mode() & 0o7777 != 0o600 {
        file.set_permissions(Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_bound_with_its_mode_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        // SAFETY: getegid cannot fail.
        let group = unsafe { libc::getegid() };
        let listener = bind_listener(&path, 0o660, Some(group)).unwrap();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        assert!(metadata.file_type().is_socket());
        assert_eq!((metadata.mode() & 0o7777, metadata.gid()), (0o660, group));
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        drop(listener);
        // Rebinding replaces the file left behind; nothing temporary remains.
        bind_listener(&path, 0o600, None).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_path_too_long_for_a_socket_is_refused() {
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(120)));
        let error = bind_listener(&long, 0o600, None).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_lock_file_is_0600_and_never_reached_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("s.sock.lock");
        open_lock_file(&lock).unwrap();
        let mode = std::fs::metadata(&lock).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        // An older vbmq's world-writable lock file is narrowed.
        std::fs::set_permissions(&lock, Permissions::from_mode(0o666)).unwrap();
        open_lock_file(&lock).unwrap();
        assert_eq!(std::fs::metadata(&lock).unwrap().mode() & 0o7777, 0o600);
        // A symlink is refused, its target neither created nor changed.
        let target = dir.path().join("target");
        let link = dir.path().join("l.sock.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(open_lock_file(&link).is_err());
        assert!(!target.exists());
        // So is a second name of another file.
        std::fs::write(&target, b"keep").unwrap();
        let hard = dir.path().join("h.sock.lock");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(open_lock_file(&hard).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
