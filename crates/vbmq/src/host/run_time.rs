//! Disks that come from elsewhere once the process is confined: descriptors a client passed
//! (`vbmq ctl add-disk`), a socket inherited at start (`socket-fd=`), a file disk's own image
//! served again (`reload --replace`); and what a confined process refuses to add, with why.

use std::os::unix::net::UnixListener;
use std::path::Path;

use super::{DiskInfo, Host, HostError, ImageFiles, lock, spec_error};
use crate::config::{DiskSpec, Storage};
use crate::devices::Source;
use crate::passed_fds::{PassedDisk, image_files, listening_unix_socket};
use crate::worker::online_cpus;

impl Host {
    /// `add-disk` with what the client opened and bound for the disk (`vbmq ctl add-disk`
    /// passes its socket and, for `path=`, its image): each is checked, then served in place
    /// of what vbmq would open or bind itself. A confined vbmq serves a `path=` disk only from
    /// a passed image, and a socket outside its control socket's directory only when passed.
    pub fn add_disk_passed(&self, text: &str, passed: PassedDisk) -> Result<DiskInfo, HostError> {
        let spec = DiskSpec::parse(text, &online_cpus())?;
        let confined = self.check_run_time(&spec, &passed)?;
        let listener = passed
            .socket
            .map(listening_unix_socket)
            .transpose()
            .map_err(|e| spec_error("socket", format!("{}: {e}", spec.socket.display())))?;
        let image = match (passed.image, &spec.storage) {
            (Some(image), Storage::File(path)) => Some(
                image_files(image, passed.image_direct, spec.readonly)
                    .map_err(|e| spec_error("path", format!("{}: {e}", path.display())))?,
            ),
            _ => None,
        };
        let source = Source { image, confined };
        let prepared = self.prepare_from(text, spec, source, listener)?;
        self.start(prepared)
    }

    /// What a confined process cannot open or bind, refused with the reason before trying;
    /// what was passed must be what the spec needs. Returns whether the process is confined.
    pub(super) fn check_run_time(
        &self,
        spec: &DiskSpec,
        passed: &PassedDisk,
    ) -> Result<bool, HostError> {
        let policy = lock(&self.policy).clone();
        if spec.socket_fd.is_some() {
            return Err(spec_error(
                "socket-fd",
                "an inherited socket is for start: `vbmq ctl add-disk` passes the socket itself"
                    .into(),
            ));
        }
        let is_file = matches!(spec.storage, Storage::File(_));
        if passed.image.is_some() && !is_file {
            return Err(spec_error(
                "path",
                "an image was passed for a disk without path=".into(),
            ));
        }
        if passed.image.is_some() || passed.image_direct.is_some() {
            if passed.image.is_none() {
                return Err(spec_error(
                    "path",
                    "an O_DIRECT image was passed alone".into(),
                ));
            }
            if spec.direct != passed.image_direct.is_some() {
                let why = if spec.direct {
                    "direct=on needs the image passed with O_DIRECT too"
                } else {
                    "an O_DIRECT image was passed for a direct=off disk"
                };
                return Err(spec_error("direct", why.into()));
            }
            if spec.cache_preload {
                return Err(spec_error(
                    "cache-preload",
                    "opens the image by its path: not for a passed image".into(),
                ));
            }
        }
        if spec.track_changes && (policy.confined || passed.image.is_some()) {
            return Err(spec_error(
                "track-changes",
                "a disk with track-changes=on is given at start (--disk or --config): its map \
                 file is opened before the process is confined"
                    .into(),
            ));
        }
        if !policy.confined {
            return Ok(false);
        }
        match &spec.storage {
            Storage::Null(_) | Storage::Memory { image: None, .. } => {}
            Storage::File(_) if passed.image.is_some() => {}
            Storage::File(_) => {
                return Err(spec_error(
                    "path",
                    "a confined vbmq opens no image at run time: `vbmq ctl add-disk` opens it \
                     and passes it (docs/control.md)"
                        .into(),
                ));
            }
            // Through the connection an `rbd=` disk of the same cluster made at start.
            Storage::Rbd(target) if crate::backend::cluster_connected(target) => {}
            Storage::Rbd(_) => {
                return Err(spec_error(
                    "rbd",
                    "a confined vbmq adds an RBD disk at run time only on a cluster an rbd= disk \
                     connected to at start (same ceph-conf=, ceph-user=, ceph-timeout=; \
                     docs/operate.md)"
                        .into(),
                ));
            }
            Storage::Memory { image: Some(_), .. } => {
                return Err(spec_error(
                    "image",
                    "a confined vbmq opens no file at run time (see SECURITY.md)".into(),
                ));
            }
        }
        if passed.socket.is_some() {
            return Ok(true);
        }
        let dir = match spec.socket.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        if !policy.socket_dirs.iter().any(|d| d == dir) {
            let dirs: Vec<String> = policy
                .socket_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            return Err(spec_error(
                "socket",
                format!(
                    "{}: a confined vbmq binds run-time sockets only in {}",
                    spec.socket.display(),
                    dirs.join(", ")
                ),
            ));
        }
        Ok(true)
    }

    /// What the running disk `current` passes to itself to be served again as `new`: copies of
    /// its image's descriptors when `new` is the same image opened the same way.
    pub(super) fn passed_again(&self, current: &DiskSpec, new: &DiskSpec) -> PassedDisk {
        let same_image = matches!(
            (&current.storage, &new.storage),
            (Storage::File(a), Storage::File(b)) if a == b
        ) && current.readonly == new.readonly
            && current.direct == new.direct;
        let disks = lock(&self.disks);
        let image = disks
            .iter()
            .find(|r| r.spec.socket == current.socket)
            .and_then(|r| r.image.as_ref())
            .filter(|_| same_image)
            .and_then(|(image, direct)| {
                let direct = match direct {
                    Some(direct) => Some(direct.try_clone().ok()?),
                    None => None,
                };
                Some((image.try_clone().ok()?, direct))
            });
        match image {
            Some((image, direct)) => PassedDisk {
                socket: None,
                image: Some(image.into()),
                image_direct: direct.map(Into::into),
            },
            None => PassedDisk::default(),
        }
    }
}

/// Copies of the image a file disk is opened from (`source`'s passed descriptors, or the path
/// opened again while the process may still open it), kept for `reload --replace`.
pub(super) fn image_copy(spec: &DiskSpec, source: &Source) -> Option<ImageFiles> {
    let Storage::File(path) = &spec.storage else {
        return None;
    };
    match &source.image {
        Some((image, direct)) => {
            let direct = match direct {
                Some(direct) => Some(direct.try_clone().ok()?),
                None => None,
            };
            Some((image.try_clone().ok()?, direct))
        }
        None if !source.confined => {
            let open = |direct: bool| {
                let mut options = std::fs::OpenOptions::new();
                options.read(true).write(!spec.readonly);
                if direct {
                    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_DIRECT);
                }
                options.open(path).ok()
            };
            let image = open(false)?;
            let direct = if spec.direct { Some(open(true)?) } else { None };
            Some((image, direct))
        }
        None => None,
    }
}

/// The inherited listening socket `socket-fd=` names, owned from now on.
pub(super) fn adopt_inherited(name: &str) -> Result<UnixListener, String> {
    let fd = crate::systemd::inherited_fd(name).map_err(|e| e.to_string())?;
    // SAFETY: an open descriptor the process inherited; `prepare`'s caller gives each one to
    // one disk only, so this is its only owner.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: F_SETFD on a descriptor we own: not inherited further by anything we run.
    unsafe {
        libc::fcntl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::F_SETFD,
            libc::FD_CLOEXEC,
        )
    };
    listening_unix_socket(fd).map_err(|e| format!("{name}: {e}"))
}
