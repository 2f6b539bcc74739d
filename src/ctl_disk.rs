//! `vbmq ctl add-disk` opens and binds what the disk needs with the operator's rights, and
//! passes the descriptors with the request: a confined vbmq opens and binds nothing itself
//! (docs/control.md). The image as vbmq would open it (buffered, and `O_DIRECT` unless
//! `direct=off`; read-only with `readonly=on`); with `base=`, the base the same way but
//! read-only, and the image's map (`DISK.map`), the image and map made if missing; with
//! `key-file=`, the key file or pipe (the key itself never goes in the request); with
//! `track-changes=on`, the map file `DISK.changes` (made if missing); for a qcow2 image or
//! base, every file of its backing chain, read-only, found as QEMU finds them; the socket
//! bound at its path, with its mode and group, wherever the operator names it.

use std::fs::{File, OpenOptions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use vbmq::config::{DiskSpec, NeededFile, StorageSpec};
use vbmq::own_files::{self, Access, Create};

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
    /// Files made here (a `base=` disk's image and map), removed if the disk is refused.
    pub created: Vec<PathBuf>,
    /// The key file is a pipe: read once, it cannot be opened again at a restart.
    pub key_is_pipe: bool,
}

impl Opened {
    fn pass(&mut self, file: File, name: Passed) {
        self.fds.push(file.into());
        self.names.push(name);
    }
}

/// Opens the image (and a `base=` disk's base and map, an encrypted disk's key file) and binds
/// the socket of `text`'s disk. A spec that does not parse, or a socket that a running vbmq
/// already serves, passes nothing: vbmq answers it with its refusal.
pub fn open(text: &str) -> Result<Opened, String> {
    let Ok(spec) = DiskSpec::parse(text, &vbmq::worker::online_cpus()) else {
        return Ok(Opened::default());
    };
    let mut opened = Opened::default();
    if let Err(e) = open_files(&spec, &mut opened) {
        remove_created(&opened.created);
        return Err(e);
    }
    match bind(&spec) {
        Ok(Some(listener)) => {
            opened.fds.push(listener);
            opened.names.push(Passed::Socket);
            opened.bound = Some(spec.socket.clone());
        }
        Ok(None) => {}
        Err(e) => {
            remove_created(&opened.created);
            return Err(e);
        }
    }
    Ok(opened)
}

/// Removes the files `add-disk` made for a disk vbmq refused.
pub fn remove_created(created: &[PathBuf]) {
    for path in created {
        let _ = std::fs::remove_file(path);
    }
}

/// Opens each file the disk's stack needs (`StackSpec::needed_files`), as vbmq would.
fn open_files(spec: &DiskSpec, opened: &mut Opened) -> Result<(), String> {
    let stack = spec.stack();
    let thin = matches!(stack.storage, StorageSpec::Thin { .. });
    let mut empty = false;
    for needed in stack.needed_files() {
        match needed {
            NeededFile::Image(path) => {
                let (image, direct) = if thin {
                    open_own_image(&path, spec.direct, &mut opened.created)?
                } else {
                    open_pair("path", &path, spec.readonly, spec.direct)?
                };
                empty = metadata("path", &image, &path)?.len() == 0;
                if !thin && spec.format != vbmq::backend::ImageFormat::Raw {
                    pass_chain("path", &image, &path, opened)?;
                }
                opened.pass(image, Passed::Image);
                if let Some(direct) = direct {
                    opened.pass(direct, Passed::ImageDirect);
                }
            }
            NeededFile::Base(base) => {
                let (file, direct) = open_pair("base", &base, true, spec.direct)?;
                pass_chain("base", &file, &base, opened)?;
                opened.pass(file, Passed::Base);
                if let Some(direct) = direct {
                    opened.pass(direct, Passed::BaseDirect);
                }
            }
            NeededFile::ThinMap(map) => {
                let map = open_map(&map, empty, &mut opened.created)?;
                opened.pass(map, Passed::Map);
            }
            NeededFile::Changes(changes) => {
                let changes = open_changes(&changes, &mut opened.created)?;
                opened.pass(changes, Passed::Changes);
            }
            NeededFile::Key(key) => {
                // A pipe: waits here, with the operator's process, for its writer.
                let file = File::open(&key)
                    .map_err(|e| format!("--disk key-file: {}: {e}", key.display()))?;
                opened.key_is_pipe = metadata("key-file", &file, &key)?.file_type().is_fifo();
                opened.pass(file, Passed::Key);
            }
        }
    }
    Ok(())
}

/// The backing chain below `image` (at `path`) if it is a qcow2 image: each file opened
/// read-only, by its name relative to the image naming it, as vbmq would open it by name.
fn pass_chain(key: &str, image: &File, path: &Path, opened: &mut Opened) -> Result<(), String> {
    let error = |e: std::io::Error| format!("--disk {key}: {}: {e}", path.display());
    if !vbmq::backend::has_qcow2_magic(image).map_err(error)? {
        return Ok(());
    }
    for backing in vbmq::backend::open_backing_files(image, path).map_err(error)? {
        opened.pass(backing.file, Passed::Backing);
    }
    Ok(())
}

/// A `base=` disk's image, made empty (0600) if it does not exist (as `vbmq serve` does at
/// start), buffered and, with `direct`, with `O_DIRECT` too: a file vbmq makes, so never
/// through a symbolic link and only a regular file of the caller's with one link.
fn open_own_image(
    path: &Path,
    direct: bool,
    created: &mut Vec<PathBuf>,
) -> Result<(File, Option<File>), String> {
    let error = |e: &dyn std::fmt::Display| format!("--disk path: {}: {e}", path.display());
    let buffered = open_own(path, Create::New(0o600), created).map_err(|e| error(&e))?;
    if !direct {
        return Ok((buffered, None));
    }
    let access = Access {
        direct: true,
        ..Access::read_write(Create::No)
    };
    let direct = own_files::open(path, access).map_err(|e| error(&e))?;
    let (a, b) = (
        metadata("path", &buffered, path)?,
        metadata("path", &direct, path)?,
    );
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(error(&"replaced while opened"));
    }
    Ok((buffered, Some(direct)))
}

/// The file at `path` (read-write), made with `create` if that is `Create::New` and nothing is
/// there (recorded in `created`), else opened as it is; see [`own_files::open`].
fn open_own(path: &Path, create: Create, created: &mut Vec<PathBuf>) -> std::io::Result<File> {
    if let Create::New(_) = create {
        match own_files::open(path, Access::read_write(create)) {
            Ok(file) => {
                created.push(path.to_path_buf());
                return Ok(file);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    own_files::open(path, Access::read_write(Create::No))
}

/// `DISK.map` (at `map`), read-write; made empty (0600) if missing and DISK is empty (vbmq
/// writes its header). Never through a symbolic link; only a regular file of the caller's with
/// one link.
fn open_map(map: &Path, empty: bool, created: &mut Vec<PathBuf>) -> Result<File, String> {
    let error = |e: &dyn std::fmt::Display| format!("--disk base: {}: {e}", map.display());
    let create = if empty {
        Create::New(0o600)
    } else {
        Create::No
    };
    match open_own(map, create, created) {
        Ok(file) => Ok(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(error(
            &"missing, and DISK holds data: not a disk made from a base, or its map is lost",
        )),
        Err(e) => Err(error(&e)),
    }
}

/// `DISK.changes` (`track-changes=on`, at `changes`), read-write, made (0600) if missing; never
/// through a symbolic link, and only a regular file of the caller's with one link (vbmq checks
/// it again).
fn open_changes(changes: &Path, created: &mut Vec<PathBuf>) -> Result<File, String> {
    open_own(changes, Create::New(0o600), created)
        .map_err(|e| format!("--disk track-changes: {}: {e}", changes.display()))
}

/// `path` opened buffered and, with `direct`, with `O_DIRECT` too: one file (`key` names it in
/// errors).
fn open_pair(
    key: &str,
    path: &Path,
    readonly: bool,
    direct: bool,
) -> Result<(File, Option<File>), String> {
    let image = open_image(key, path, readonly, false)?;
    if !direct {
        return Ok((image, None));
    }
    let direct = open_image(key, path, readonly, true)?;
    let (a, b) = (metadata(key, &image, path)?, metadata(key, &direct, path)?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(format!(
            "--disk {key}: {}: replaced while opened",
            path.display()
        ));
    }
    Ok((image, Some(direct)))
}

fn metadata(key: &str, file: &File, path: &Path) -> Result<std::fs::Metadata, String> {
    file.metadata()
        .map_err(|e| format!("--disk {key}: {}: {e}", path.display()))
}

fn open_image(key: &str, path: &Path, readonly: bool, direct: bool) -> Result<File, String> {
    let mut options = OpenOptions::new();
    options.read(true).write(!readonly);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    let file = options
        .open(path)
        .map_err(|e| format!("--disk {key}: {}: {e}", path.display()))?;
    let kind = metadata(key, &file, path)?.file_type();
    if !kind.is_file() && !kind.is_block_device() {
        return Err(format!(
            "--disk {key}: {}: not a regular file or a block device",
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
