//! `vbmq ctl export-begin SOCKET NBD_ADDR` and `export-end`, the client's side: it binds the
//! export's socket (0600) and makes its scratch file with the operator's rights, and passes
//! both (a confined vbmq makes neither). The scratch is an unnamed file (`O_TMPFILE`) in the
//! image's directory or `--scratch-dir`: it goes with the export or the process, whichever
//! ends first, and nothing is left to clean after a crash. A `tcp:HOST:PORT` export is bound
//! with its TLS credentials by [`crate::ctl_tls`].

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use crate::control::protocol::{Answer, DeviceEntry, Reply};

/// What `export-begin` passes, held until the reply.
pub struct Opened {
    listener: OwnedFd,
    /// None for a writable export, which saves nothing.
    scratch: Option<File>,
    /// The socket file of a `unix:` export.
    path: Option<PathBuf>,
    /// A `tcp:` export's TLS credentials, passed last.
    creds: Vec<File>,
}

impl Opened {
    /// The descriptors in the order the daemon takes them.
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        std::iter::once(self.listener.as_fd())
            .chain(self.scratch.as_ref().map(AsFd::as_fd))
            .chain(self.creds.iter().map(AsFd::as_fd))
            .collect()
    }

    /// The request was refused: the socket made for it goes.
    pub fn discard(self) {
        drop(self.listener);
        if let Some(path) = &self.path {
            remove_socket(path);
        }
    }
}

/// The socket path of `unix:PATH`.
pub fn unix_path(address: &str) -> Result<PathBuf, String> {
    if let Some(path) = address.strip_prefix("unix:") {
        let path = PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!("{address}: the socket path must be absolute"));
        }
        return Ok(path);
    }
    Err(format!(
        "{address}: NBD_ADDR is unix:PATH or tcp:HOST:PORT (with --tls-creds DIR)"
    ))
}

/// Binds the export's socket at `address` and makes the scratch file in `scratch_dir`, or
/// beside the image of the disk on `socket` (which `list` asks of the daemon).
pub fn open(
    socket: &str,
    address: &str,
    scratch_dir: Option<&Path>,
    tls_creds: Option<&Path>,
    list: impl FnOnce() -> std::io::Result<Reply>,
) -> Result<Opened, String> {
    let dir = match scratch_dir {
        Some(dir) => dir.to_path_buf(),
        None => image_dir(socket, list)?,
    };
    let scratch = File::options()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(&dir)
        .map_err(|e| {
            format!(
                "scratch file in {}: {e} (give --scratch-dir)",
                dir.display()
            )
        })?;
    let mut opened = listen(address, tls_creds)?;
    opened.scratch = Some(scratch);
    Ok(opened)
}

/// `export-begin --writable`: binds the export's socket at `address` (no scratch).
pub fn open_writable(address: &str, tls_creds: Option<&Path>) -> Result<Opened, String> {
    listen(address, tls_creds)
}

/// Binds `address`: a Unix socket file, or a TCP socket with its TLS credentials.
fn listen(address: &str, tls_creds: Option<&Path>) -> Result<Opened, String> {
    if let Some(tcp) = crate::ctl_tls::bind(address, tls_creds)? {
        return Ok(Opened {
            listener: tcp.listener.into(),
            scratch: None,
            path: None,
            creds: tcp.creds,
        });
    }
    let (listener, path) = bind(address, unix_path(address)?)?;
    Ok(Opened {
        listener: listener.into(),
        scratch: None,
        path: Some(path),
        creds: Vec::new(),
    })
}

/// Binds the socket file `path` (0600) of `address`. A file already there is refused, unless
/// it is a stale socket of the caller's (a vbmq killed while exporting left it: no one listens).
fn bind(address: &str, path: PathBuf) -> Result<(UnixListener, PathBuf), String> {
    if let Ok(found) = std::fs::symlink_metadata(&path) {
        // SAFETY: geteuid has no preconditions.
        let ours = found.uid() == unsafe { libc::geteuid() };
        let stale = || {
            std::os::unix::net::UnixStream::connect(&path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
        };
        if !(found.file_type().is_socket() && ours && stale()) {
            return Err(format!("{address}: {} exists", path.display()));
        }
        std::fs::remove_file(&path).map_err(|e| format!("{address}: {e}"))?;
    }
    let listener = vbmq::socket_files::bind_listener(&path, 0o600, None)
        .map_err(|e| format!("{address}: {e}"))?;
    Ok((listener, path))
}

/// The directory of the disk's image, from the daemon's `list`.
fn image_dir(
    socket: &str,
    list: impl FnOnce() -> std::io::Result<Reply>,
) -> Result<PathBuf, String> {
    let reply = list().map_err(|e| format!("list: {e}"))?;
    let Some(Answer::Devices(devices)) = reply.result else {
        return Err(reply.error.unwrap_or_else(|| "list: no devices".into()));
    };
    let spec = devices
        .iter()
        .find_map(|d| match d {
            DeviceEntry::Disk(disk) if disk.socket == socket => Some(disk.spec.clone()),
            _ => None,
        })
        .ok_or_else(|| format!("no disk on {socket}"))?;
    let spec = vbmq::config::DiskSpec::parse(&spec, &vbmq::worker::online_cpus())
        .map_err(|e| e.to_string())?;
    let vbmq::config::Storage::File(image) = spec.storage else {
        return Err("only path= disks have exports".into());
    };
    let is_file = std::fs::metadata(&image).is_ok_and(|m| m.is_file());
    match image.parent() {
        Some(dir) if is_file && image.is_absolute() => Ok(dir.to_path_buf()),
        _ => Err(format!(
            "{}: not a file with an absolute path: give --scratch-dir",
            image.display()
        )),
    }
}

/// Removes the export's socket file, if it is still a socket.
pub fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}
