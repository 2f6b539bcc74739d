//! `vbmq ctl add-disk` opens and binds what the disk needs with the operator's rights, and
//! passes the descriptors with the request: a confined vbmq opens and binds nothing itself
//! (docs/control.md). The image as vbmq would open it (buffered, and `O_DIRECT` unless
//! `direct=off`; read-only with `readonly=on`); the socket bound at its path, with its mode and
//! group, wherever the operator names it.

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use vbmq::config::{DiskSpec, Storage};

use crate::control::protocol::Passed;

/// What `add-disk` passes, and the socket file the client made (removed if the disk is refused).
#[derive(Default)]
pub struct Opened {
    /// The descriptors, in the order of `names`.
    pub fds: Vec<OwnedFd>,
    /// What each descriptor is.
    pub names: Vec<Passed>,
    /// The socket file bound here.
    pub bound: Option<PathBuf>,
}

/// Opens the image and binds the socket of `text`'s disk. A spec that does not parse, or a
/// socket that a running vbmq already serves, passes nothing: vbmq answers it with its refusal.
pub fn open(text: &str) -> Result<Opened, String> {
    let Ok(spec) = DiskSpec::parse(text, &vbmq::worker::online_cpus()) else {
        return Ok(Opened::default());
    };
    let mut opened = Opened::default();
    if let Storage::File(path) = &spec.storage {
        let image = open_image(path, spec.readonly, false)?;
        let direct = if spec.direct {
            let direct = open_image(path, spec.readonly, true)?;
            let (a, b) = (metadata(&image, path)?, metadata(&direct, path)?);
            if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
                return Err(format!(
                    "--disk path: {}: replaced while opened",
                    path.display()
                ));
            }
            Some(direct)
        } else {
            None
        };
        opened.fds.push(image.into());
        opened.names.push(Passed::Image);
        if let Some(direct) = direct {
            opened.fds.push(direct.into());
            opened.names.push(Passed::ImageDirect);
        }
    }
    if let Some(listener) = bind(&spec)? {
        opened.fds.push(listener);
        opened.names.push(Passed::Socket);
        opened.bound = Some(spec.socket.clone());
    }
    Ok(opened)
}

fn metadata(file: &File, path: &Path) -> Result<std::fs::Metadata, String> {
    file.metadata()
        .map_err(|e| format!("--disk path: {}: {e}", path.display()))
}

fn open_image(path: &Path, readonly: bool, direct: bool) -> Result<File, String> {
    let mut options = OpenOptions::new();
    options.read(true).write(!readonly);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    let file = options
        .open(path)
        .map_err(|e| format!("--disk path: {}: {e}", path.display()))?;
    let kind = metadata(&file, path)?.file_type();
    if !kind.is_file() && !kind.is_block_device() {
        return Err(format!(
            "--disk path: {}: not a regular file or a block device",
            path.display()
        ));
    }
    Ok(file)
}

/// The disk's socket, bound and listening at its path; `None` where a live socket is already
/// there (vbmq says whose). A stale socket file is replaced; any other file is refused.
fn bind(spec: &DiskSpec) -> Result<Option<OwnedFd>, String> {
    let path = &spec.socket;
    let error = |e: &dyn std::fmt::Display| format!("--disk socket: {}: {e}", path.display());
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Ok(None);
            }
        }
        Ok(_) => return Err(error(&"exists and is not a socket")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(error(&e)),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| error(&e))?;
    }
    let listener = vbmq::socket_files::bind_listener(path, spec.socket_mode, spec.socket_group)
        .map_err(|e| error(&e))?;
    Ok(Some(listener.into()))
}

/// Removes the socket file at `path` if no one listens on it any more: the socket of a disk
/// vbmq refused, or removed (a passed socket's file is the client's to remove).
pub fn remove_stale_socket(path: &Path) {
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    if is_socket
        && let Err(e) = UnixStream::connect(path)
        && e.kind() == std::io::ErrorKind::ConnectionRefused
    {
        let _ = std::fs::remove_file(path);
    }
}
