//! `vbmq ctl add-fs` and `remove-fs`, the client's side: it opens the shared directory and
//! binds the share's socket with the operator's rights, where the operator names it, and sends
//! the descriptors with the request (a confined vbmq opens and binds nothing at run time).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use vbmq::config::FsSpec;

/// What `add-fs` sends: the directory, a detached mount of it (where this process may make
/// one), the listening socket and its lock file, held.
pub struct OpenedShare {
    dir: File,
    mount: Option<File>,
    listener: UnixListener,
    lock: File,
    socket: PathBuf,
}

impl OpenedShare {
    /// The descriptors in the order the daemon takes them.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        let mount = self.mount.as_ref().map(AsFd::as_fd);
        let rest = [self.listener.as_fd(), self.lock.as_fd()];
        std::iter::once(self.dir.as_fd())
            .chain(mount)
            .chain(rest)
            .collect()
    }

    /// Whether a mount of the directory is sent (the request says so).
    pub fn has_mount(&self) -> bool {
        self.mount.is_some()
    }

    /// The request was refused: the socket and lock file made for it go.
    pub fn discard(self) {
        drop(self.listener);
        remove_files(&self.socket);
    }
}

/// The lock file beside `socket`, as vbmq names it.
fn lock_path(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Opens and binds what the share `text` (an `--fs` value) needs; the error is one line.
pub fn open_share(text: &str) -> Result<OpenedShare, String> {
    let spec = FsSpec::parse(text, &vbmq::worker::online_cpus()).map_err(|e| e.to_string())?;
    if !spec.socket.is_absolute() {
        return Err(format!("--fs socket: {}", vbmq::host::RELATIVE_SOCKET));
    }
    let (dir, mount) = open_dir(&spec.dir)?;
    let socket_error = |e: io::Error| format!("--fs socket: {}: {e}", spec.socket.display());
    if let Some(parent) = spec.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(socket_error)?;
    }
    let lock =
        vbmq::socket_files::open_lock_file(&lock_path(&spec.socket)).map_err(socket_error)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "--fs socket: {} is served by a running vbmq",
            spec.socket.display()
        ));
    }
    // A socket with no lock beside it that someone listens on (a control socket): kept.
    if is_socket(&spec.socket) && UnixStream::connect(&spec.socket).is_ok() {
        return Err(format!(
            "--fs socket: {} is a socket another server listens on",
            spec.socket.display()
        ));
    }
    let listener =
        vbmq::socket_files::bind_listener(&spec.socket, spec.socket_mode, spec.socket_group)
            .map_err(socket_error)?;
    Ok(OpenedShare {
        dir,
        mount,
        listener,
        lock,
        socket: spec.socket,
    })
}

/// The shared directory `dir` (followed: the operator named it), and a detached mount of it
/// where this process may make one (`CAP_SYS_ADMIN`; the daemon, confined, may not): the
/// share is then served from the mount, where the kernel keeps `..` inside (SECURITY.md).
pub fn open_dir(dir: &Path) -> Result<(File, Option<File>), String> {
    let opened = File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)
        .map_err(|e| format!("--fs dir: {}: {e}", dir.display()))?;
    let mount = vbmq::virtio_fs::detached_mount(&opened).ok();
    Ok((opened, mount))
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Removes the socket file at `socket` and its lock file, if they are still there (the daemon
/// removes them itself where its confinement lets it). A relative path names a file in the
/// daemon's working directory, not ours: left alone.
pub fn remove_files(socket: &Path) {
    if !socket.is_absolute() {
        return;
    }
    if is_socket(socket) {
        let _ = std::fs::remove_file(socket);
    }
    let lock = lock_path(socket);
    if std::fs::symlink_metadata(&lock).is_ok_and(|m| m.file_type().is_file()) {
        let _ = std::fs::remove_file(lock);
    }
}
