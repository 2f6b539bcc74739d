//! Disks that come from elsewhere once the process is confined: descriptors a client passed
//! (`vbmq ctl add-disk`), a socket inherited at start (`socket-fd=`), a file disk's own image
//! served again (`reload --replace`); and what a confined process refuses to add, with why.

use std::fs::File;
use std::os::unix::net::UnixListener;
use std::path::Path;

use super::{DiskInfo, Host, HostError, RunTimePolicy, lock, spec_error};
use crate::config::{DiskSpec, NeededFile, Storage};
use crate::devices::{PassedThin, Source};
use crate::passed_fds::{
    PassedDisk, backing_files, base_files, changes_file, image_files, key_file,
    listening_unix_socket, map_file,
};
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
        let in_path = |key: &'static str| {
            let path = match (&spec.storage, key) {
                (_, "base") => spec.base.clone().unwrap_or_default(),
                (_, "key-file") => spec.key_file.clone().unwrap_or_default(),
                (Storage::File(path), _) => path.clone(),
                _ => Default::default(),
            };
            move |e: std::io::Error| spec_error(key, format!("{}: {e}", path.display()))
        };
        // A passed image's chain is passed too (none for a raw or flat image): never by name.
        let backing = if passed.image.is_some() {
            let base_or_image = if spec.base.is_some() { "base" } else { "path" };
            Some(backing_files(passed.backing).map_err(in_path(base_or_image))?)
        } else {
            None
        };
        let image = match (passed.image, &spec.storage) {
            (Some(image), Storage::File(_)) => {
                let files = image_files(image, passed.image_direct, spec.readonly)
                    .map_err(in_path("path"))?;
                if spec.base.is_some() && !files.0.metadata().map_err(in_path("path"))?.is_file() {
                    let e = std::io::Error::other("with base=, DISK must be a regular file");
                    return Err(in_path("path")(e));
                }
                Some(files)
            }
            _ => None,
        };
        // An NBD base has no file: the map comes alone (see `check_passed`).
        let thin = match (passed.base, passed.map) {
            (base, Some(map)) => Some(PassedThin {
                base: base
                    .map(|base| base_files(base, passed.base_direct))
                    .transpose()
                    .map_err(in_path("base"))?,
                map: map_file(map, passed.client_uid).map_err(in_path("base"))?,
            }),
            _ => None,
        };
        let key = passed
            .key
            .map(|key| key_file(key, passed.client_uid))
            .transpose()
            .map_err(in_path("key-file"))?;
        let changes = passed
            .changes
            .map(|changes| changes_file(changes, passed.client_uid))
            .transpose()
            .map_err(in_path("track-changes"))?;
        let source = Source {
            image,
            thin,
            key,
            changes,
            confined,
            backing,
        };
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
        check_passed(spec, passed)?;
        if !policy.confined {
            return Ok(false);
        }
        check_confined(spec, passed)?;
        if passed.socket.is_none() {
            check_socket_dir(spec, &policy)?;
        }
        Ok(true)
    }
}

/// What was passed must be what the spec needs, each file with what it is passed beside.
fn check_passed(spec: &DiskSpec, passed: &PassedDisk) -> Result<(), HostError> {
    if spec.socket_fd.is_some() {
        return Err(spec_error(
            "socket-fd",
            "an inherited socket is for start: `vbmq ctl add-disk` passes the socket itself".into(),
        ));
    }
    let needed = spec.stack().needed_files();
    let needs = |kind: fn(&NeededFile) -> bool| needed.iter().any(kind);
    if passed.image.is_some() && !needs(|f| matches!(f, NeededFile::Image(_))) {
        return Err(spec_error(
            "path",
            "an image was passed for a disk without path=".into(),
        ));
    }
    let thin_passed = passed.base.is_some() || passed.map.is_some();
    if thin_passed || passed.base_direct.is_some() {
        if !needs(|f| matches!(f, NeededFile::ThinMap(_))) {
            return Err(spec_error(
                "base",
                "a base or a map was passed for a disk without base=".into(),
            ));
        }
        let base_file = needs(|f| matches!(f, NeededFile::Base(_)));
        let base_passed = passed.base.is_some() || passed.base_direct.is_some();
        if passed.image.is_none() || base_passed != base_file || passed.map.is_none() {
            return Err(spec_error(
                "base",
                "a base= disk's image, base and map are passed together (an NBD base's \
                 image and map only)"
                    .into(),
            ));
        }
        if base_file && spec.direct != passed.base_direct.is_some() {
            let why = if spec.direct {
                "direct=on needs the base passed with O_DIRECT too"
            } else {
                "an O_DIRECT base was passed for a direct=off disk"
            };
            return Err(spec_error("direct", why.into()));
        }
    }
    if !passed.backing.is_empty() && passed.image.is_none() {
        return Err(spec_error(
            "path",
            "a backing chain is passed with its image (and a base= disk's base)".into(),
        ));
    }
    if !passed.backing.is_empty() && spec.base.is_some() && passed.base.is_none() {
        return Err(spec_error(
            "base",
            "a backing chain was passed for a base that is not a file".into(),
        ));
    }
    if passed.key.is_some() && !needs(|f| matches!(f, NeededFile::Key(_))) {
        return Err(spec_error(
            "key-file",
            "a key was passed for a disk without key-file=".into(),
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
    if passed.changes.is_some() && !needs(|f| matches!(f, NeededFile::Changes(_))) {
        return Err(spec_error(
            "track-changes",
            "a changes file was passed for a disk without track-changes=on".into(),
        ));
    }
    if spec.track_changes && passed.image.is_some() != passed.changes.is_some() {
        return Err(spec_error(
            "track-changes",
            "a tracked disk's image and its map file DISK.changes are passed together \
                 (`vbmq ctl add-disk` opens both: docs/control.md)"
                .into(),
        ));
    }
    Ok(())
}

/// What a confined process cannot open or make at run time, refused with the reason.
fn check_confined(spec: &DiskSpec, passed: &PassedDisk) -> Result<(), HostError> {
    if spec.base.is_some() && passed.image.is_some() && passed.map.is_none() {
        return Err(spec_error(
            "base",
            "a confined vbmq opens no base or map at run time: `vbmq ctl add-disk` opens \
                 them and passes them (docs/control.md)"
                .into(),
        ));
    }
    // A queue's ring holds twice its requests, each split by block in up to four parts.
    let pooled = crate::backend::ring_pool::POOLED_DEPTH;
    if spec.base.is_some() && u32::from(spec.queue_size) * 8 > pooled {
        return Err(spec_error(
            "queue-size",
            format!(
                "a base= disk added at run time takes at most queue-size={}",
                pooled / 8
            ),
        ));
    }
    // Its queues read the base through the disk's ring: no positional fallback.
    if spec.base.is_some() && crate::backend::ring_pool::available() == 0 {
        return Err(spec_error(
            "base",
            "no spare io_uring ring left: a base= disk added at run time needs one per \
                 queue (raise --run-time-rings)"
                .into(),
        ));
    }
    if spec.key_file.is_some() && passed.key.is_none() {
        return Err(spec_error(
            "key-file",
            "a confined vbmq reads no key file at run time: `vbmq ctl add-disk` opens it \
                 and passes it (docs/control.md)"
                .into(),
        ));
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
    Ok(())
}

/// A confined process binds a socket it was not passed only in the directories it may.
fn check_socket_dir(spec: &DiskSpec, policy: &RunTimePolicy) -> Result<(), HostError> {
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
    Ok(())
}

impl Host {
    /// What the running disk `current` passes to itself to be served again as `new`: copies of
    /// its files' descriptors (image, a `base=` disk's base and map, a tracked disk's
    /// `DISK.changes` if `new` is tracked) when `new` is the same image over the same base,
    /// opened the same way. A key is never kept: an encrypted disk is not served again by a
    /// confined process.
    pub(super) fn passed_again(&self, current: &DiskSpec, new: &DiskSpec) -> PassedDisk {
        let same_image = matches!(
            (&current.storage, &new.storage),
            (Storage::File(a), Storage::File(b)) if a == b
        ) && current.readonly == new.readonly
            && current.direct == new.direct
            && current.base == new.base;
        let disks = lock(&self.disks);
        disks
            .iter()
            .find(|r| r.spec.socket == current.socket)
            .and_then(|r| r.image.as_ref())
            .filter(|_| same_image)
            .and_then(|kept| kept.passed(new.track_changes))
            .unwrap_or_default()
    }
}

/// Copies of what a file disk is opened from, kept to serve it again (`reload --replace`).
pub(super) struct KeptFiles {
    /// The image, buffered and `O_DIRECT`.
    image: (File, Option<File>),
    /// `base=`: the base (buffered and `O_DIRECT`) and the map.
    thin: Option<((File, Option<File>), File)>,
    /// `track-changes=on`: the map file `DISK.changes`.
    changes: Option<File>,
    /// A qcow2 image's or base's backing chain, top's backing file first.
    backing: Vec<File>,
}

fn copy_pair(pair: &(File, Option<File>)) -> Option<(File, Option<File>)> {
    let direct = match &pair.1 {
        Some(direct) => Some(direct.try_clone().ok()?),
        None => None,
    };
    Some((pair.0.try_clone().ok()?, direct))
}

impl KeptFiles {
    /// Copies of what `source` passes (before it is consumed).
    pub(super) fn of_source(source: &Source) -> Option<Self> {
        let image = copy_pair(source.image.as_ref()?)?;
        let thin = match &source.thin {
            // An NBD base's disk is not kept: it is not served again confined.
            Some(thin) => Some((copy_pair(thin.base.as_ref()?)?, thin.map.try_clone().ok()?)),
            None => None,
        };
        let changes = match &source.changes {
            Some(changes) => Some(changes.try_clone().ok()?),
            None => None,
        };
        let backing = match &source.backing {
            Some(chain) => chain
                .iter()
                .map(|f| f.try_clone().ok())
                .collect::<Option<_>>()?,
            None => Vec::new(),
        };
        Some(KeptFiles {
            image,
            thin,
            changes,
            backing,
        })
    }

    /// The files of the file disk `spec` opened again by their paths (while the process may
    /// still open them: once the disk is built, so a `base=` disk's map exists).
    pub(super) fn reopen(spec: &DiskSpec) -> Option<Self> {
        let open = |path: &Path, write: bool, direct: bool| {
            let mut options = std::fs::OpenOptions::new();
            options.read(true).write(write);
            if direct {
                std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_DIRECT);
            }
            options.open(path).ok()
        };
        let pair = |path: &Path, write: bool| {
            let buffered = open(path, write, false)?;
            let direct = if spec.direct {
                Some(open(path, write, true)?)
            } else {
                None
            };
            Some((buffered, direct))
        };
        let (mut image, mut base, mut map, mut changes) = (None, None, None, None);
        let mut backing = Vec::new();
        for needed in spec.stack().needed_files() {
            match needed {
                NeededFile::Image(path) => {
                    let files = pair(&path, !spec.readonly)?;
                    if spec.format != crate::backend::ImageFormat::Raw {
                        backing = chain_below(&files.0, &path)?;
                    }
                    image = Some(files);
                }
                NeededFile::Base(path) => {
                    let files = pair(&path, false)?;
                    backing = chain_below(&files.0, &path)?;
                    base = Some(files);
                }
                NeededFile::ThinMap(path) => map = Some(open(&path, true, false)?),
                NeededFile::Changes(path) => changes = Some(open(&path, true, false)?),
                // A key is never kept: an encrypted disk is not served again confined.
                NeededFile::Key(_) => {}
            }
        }
        Some(KeptFiles {
            image: image?,
            thin: base.zip(map),
            changes,
            backing,
        })
    }

    /// Copies as a client would pass them; the map file `DISK.changes` if `tracked`.
    fn passed(&self, tracked: bool) -> Option<PassedDisk> {
        let (image, image_direct) = copy_pair(&self.image)?;
        let mut passed = PassedDisk {
            image: Some(image.into()),
            image_direct: image_direct.map(Into::into),
            ..PassedDisk::default()
        };
        if let Some((base, map)) = &self.thin {
            let (base, base_direct) = copy_pair(base)?;
            passed.base = Some(base.into());
            passed.base_direct = base_direct.map(Into::into);
            passed.map = Some(map.try_clone().ok()?.into());
        }
        if tracked {
            passed.changes = Some(self.changes.as_ref()?.try_clone().ok()?.into());
        }
        for file in &self.backing {
            passed.backing.push(file.try_clone().ok()?.into());
        }
        Some(passed)
    }
}

/// The backing chain below `image` (at `path`) if it is a qcow2 image, opened by name.
fn chain_below(image: &File, path: &Path) -> Option<Vec<File>> {
    if !crate::backend::has_qcow2_magic(image).ok()? {
        return Some(Vec::new());
    }
    let chain = crate::backend::open_backing_files(image, path).ok()?;
    Some(chain.into_iter().map(|backing| backing.file).collect())
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
