//! A disk from its spec: the storage (a file or block device, RBD, memory or null), the read
//! cache and the delay knob in front of it, the virtio-blk device, and its bound socket.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::handles::Handles;
use super::layers::{LayerInputs, TrackedFiles, open_layer};
use crate::backend::cache::ImageId;
use crate::backend::changes::ImageFile;
use crate::backend::{
    Backings, Disk, FileDisk, MemoryDisk, MirrorDisk, NbdBase, NullDisk, RbdDisk, RbdTarget,
    SnapshotDisk, ThinBase, ThinDisk, ThinOptions, guard_probed_raw, open_qcow2, thin_base,
};
use crate::config::{BaseSpec, DiskSpec, LayerSpec, SpecError, StackSpec, Storage, StorageSpec};
use crate::own_files::{self, Access, Create};
use crate::vhost_user::DiskServer;
use crate::virtio_blk::BlkDevice;
use crate::worker::QueueSettings;

fn default_serial(spec: &DiskSpec) -> String {
    match &spec.storage {
        // The file name's last 20 bytes (on a character boundary): what tells disks apart.
        Storage::File(path) => {
            let name = path
                .file_name()
                .map_or("vbmq".into(), |n| n.to_string_lossy().into_owned());
            let mut start = name.len().saturating_sub(20);
            while !name.is_char_boundary(start) {
                start += 1;
            }
            name[start..].to_string()
        }
        Storage::Null(_) => "vbmq-null".into(),
        Storage::Memory { .. } => "vbmq-mem".into(),
        Storage::Rbd(target) => {
            let name = &target.image;
            let mut start = name.len().saturating_sub(20);
            while !name.is_char_boundary(start) {
                start += 1;
            }
            name[start..].to_string()
        }
    }
}

/// What a disk is opened from: its spec's paths, or the image a client passed (buffered and
/// `O_DIRECT` descriptors, checked), served without a ring when `confined`.
#[derive(Default)]
pub(crate) struct Source {
    /// The image, passed.
    pub image: Option<(File, Option<File>)>,
    /// `base=`: the base image and the image's map, passed (with the image).
    pub thin: Option<PassedThin>,
    /// `key-file=`: the key file or pipe, passed.
    pub key: Option<File>,
    /// `track-changes=on`: the image's map file (`DISK.changes`), passed (with the image).
    pub changes: Option<File>,
    /// The backing chain of a qcow2 image or base, passed (with it), top's backing file first;
    /// `None`: opened by name.
    pub backing: Option<Vec<File>>,
    /// The process is confined: every queue does its I/O with positional system calls (no ring
    /// can be made), and an RBD image is opened only through a cluster connection made at start.
    pub confined: bool,
}

/// What a `base=` disk's client passed beside its image: the base (buffered and `O_DIRECT`)
/// and the map file, each checked (see `crate::passed_fds`).
pub(crate) struct PassedThin {
    /// The base, read-only (none for an NBD base, which vbmq connects to).
    pub base: Option<(File, Option<File>)>,
    /// `DISK.map`, read-write.
    pub map: File,
}

/// An open disk and the files it keeps reading (a Ceph configuration and keyring): its
/// storage, then each layer of its stack over the one below; the verbs its layers answer go
/// to `handles`.
fn open_disk(
    spec: &DiskSpec,
    source: Source,
    handles: &mut Handles,
) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let stack = spec.stack();
    let Source {
        image,
        thin,
        key,
        changes,
        confined,
        backing,
    } = source;
    let mut inputs = LayerInputs {
        key,
        label: spec.socket.display().to_string(),
        ..LayerInputs::default()
    };
    if let Some(path) = stack.image() {
        // Before the image is opened: opening it moves its modification time. A passed
        // image is asked through its descriptor, before vbmq writes or probes it.
        let passed_image = image.as_ref().map(|(image, _)| image);
        inputs.tracked = tracked_files(&stack, path, passed_image, changes)?;
        inputs.cache_id = passed_image
            .map(image_id)
            .transpose()
            .map_err(|e| SpecError {
                key: "path".into(),
                reason: format!("{}: {e}", path.display()),
            })?;
    }
    let source = Source {
        image,
        thin,
        confined,
        backing,
        ..Source::default()
    };
    let (mut disk, files) = open_storage(spec, &stack.storage, source, handles)?;
    for layer in &stack.layers {
        let mirror_here = matches!(layer, LayerSpec::Encrypt { .. } | LayerSpec::Delay { .. });
        if mirror_here && handles.mirror.is_none() {
            disk = mirrored(disk, handles);
        }
        disk = open_layer(&stack, layer, disk, &mut inputs, handles)?;
    }
    if handles.mirror.is_none() {
        disk = mirrored(disk, handles);
    }
    Ok((disk, files))
}

/// The mirror layer (`mirror-begin`) over `disk`: at the top of the stack, under the test-only
/// delay layer, so a mirror sends what the guest sees; or right under the cipher, so a mirror
/// sends ciphertext and its destination needs no key (it writes at the same level).
fn mirrored(disk: Arc<dyn Disk>, handles: &mut Handles) -> Arc<dyn Disk> {
    let mirror = Arc::new(MirrorDisk::new(disk));
    handles.mirror = Some(Arc::downgrade(&mirror));
    mirror
}

/// The storage, with the snapshot layer over a `path=` disk's (it reads the image beneath the
/// engines, so it is built with the storage, not over any disk).
fn open_storage(
    spec: &DiskSpec,
    storage: &StorageSpec,
    mut source: Source,
    handles: &mut Handles,
) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let mut raw_file = false;
    let snapshots = match storage {
        StorageSpec::File { path } => {
            let backings = backings(source.backing.take());
            let file = open_file(spec, path, spec.readonly, source)?;
            match open_qcow2(file, path, spec.format, spec.readonly, backings) {
                Ok(Ok(qcow2)) => SnapshotDisk::over_qcow2(qcow2),
                Ok(Err(raw)) => {
                    raw_file = true;
                    handles.writer_seat = raw.writer_seat();
                    SnapshotDisk::over_file(raw)
                }
                Err(e) => return Err(path_error(path, e)),
            }
        }
        StorageSpec::Thin {
            path,
            base,
            options,
        } => SnapshotDisk::over_thin(open_thin_disk(spec, path, base, *options, source)?),
        StorageSpec::Rbd(target) => {
            return open_rbd(target, spec.readonly, source.confined, handles);
        }
        StorageSpec::Memory { size, image } => return open_memory(*size, image.as_deref()),
        StorageSpec::Null(size) => return Ok((Arc::new(NullDisk::new(*size)), Vec::new())),
    };
    let path = match storage {
        StorageSpec::File { path } | StorageSpec::Thin { path, .. } => path.as_path(),
        _ => Path::new(""),
    };
    let snapshots = Arc::new(snapshots.map_err(|e| path_error(path, e))?);
    handles.snapshots = Some(Arc::clone(&snapshots));
    // A raw image is guarded against a guest writing the qcow2 magic; a qcow2 disk's guest
    // bytes are not the file's.
    let disk = if raw_file {
        guard_probed_raw(snapshots, spec.format, spec.readonly)
    } else {
        snapshots as Arc<dyn Disk>
    };
    Ok((disk, Vec::new()))
}

/// Where a qcow2 image's or base's chain comes from: the files passed, or their names.
fn backings(passed: Option<Vec<File>>) -> Backings {
    passed.map_or(Backings::ByName, Backings::Given)
}

fn path_error(path: &Path, e: std::io::Error) -> SpecError {
    SpecError {
        key: "path".into(),
        reason: format!("{}: {e}", path.display()),
    }
}

/// An RBD image, and the files its cluster connection keeps reading.
fn open_rbd(
    target: &RbdTarget,
    readonly: bool,
    confined: bool,
    handles: &mut Handles,
) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let opened = if confined {
        RbdDisk::open_connected(target, readonly)
    } else {
        RbdDisk::open(target, readonly)
    };
    let disk = opened.map_err(|e| SpecError {
        key: "rbd".into(),
        reason: format!("{}/{}: {e}", target.pool, target.image),
    })?;
    handles.snapshots_elsewhere =
        Some("an RBD disk has Ceph's own snapshots: rbd snap create POOL/IMAGE@NAME");
    let files = disk.files().to_vec();
    Ok((Arc::new(disk), files))
}

/// A disk in host memory, loaded from `image` if given.
fn open_memory(
    size: u64,
    image: Option<&Path>,
) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let disk = match image {
        Some(image) => MemoryDisk::load(size, image),
        None => MemoryDisk::new(size),
    };
    let disk = disk.map_err(|e| match image {
        Some(image) => SpecError {
            key: "image".into(),
            reason: format!("{}: {e}", image.display()),
        },
        None => SpecError {
            key: "mem".into(),
            reason: e.to_string(),
        },
    })?;
    Ok((Arc::new(disk), Vec::new()))
}

/// The passed image (`source`), or the one at `path`.
fn open_image(
    path: &Path,
    spec: &DiskSpec,
    readonly: bool,
    source: Source,
) -> std::io::Result<FileDisk> {
    let disk = match source.image {
        Some((image, direct)) => FileDisk::from_files(image, direct, readonly),
        None => FileDisk::open(path, readonly, spec.direct),
    }?;
    Ok(if source.confined {
        disk.positional()
    } else {
        disk
    })
}

/// A tracked disk's image, opened here (or a copy of the passed descriptor) before the disk is,
/// so its time is read through that descriptor, and for a passed image the map file passed
/// with it; `None` when the disk is not tracked.
fn tracked_files(
    stack: &StackSpec,
    path: &Path,
    image: Option<&File>,
    changes: Option<File>,
) -> Result<Option<TrackedFiles>, SpecError> {
    let tracked = stack
        .layers
        .iter()
        .any(|layer| matches!(layer, LayerSpec::TrackChanges { .. }));
    if !tracked {
        return Ok(None);
    }
    let error = |e: std::io::Error| SpecError {
        key: "track-changes".into(),
        reason: format!("{}: {e}", path.display()),
    };
    let Some(image) = image else {
        let image = match File::open(path) {
            Ok(image) => Some(ImageFile::new(image)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(error(e)),
        };
        return Ok(Some((image, None)));
    };
    let Some(changes) = changes else {
        let e =
            std::io::Error::other("a passed image is tracked only with its DISK.changes passed");
        return Err(error(e));
    };
    let image = image.try_clone().map_err(error)?;
    Ok(Some((Some(ImageFile::new(image)), Some(changes))))
}

/// A raw image file or block device (passed, or at `path`), set up as `spec` says.
fn open_file(
    spec: &DiskSpec,
    path: &Path,
    readonly: bool,
    source: Source,
) -> Result<FileDisk, SpecError> {
    open_image(path, spec, readonly, source)
        .and_then(|disk| {
            if spec.lock {
                disk.lock(spec.handover)
            } else {
                Ok(disk)
            }
        })
        .map(|disk| {
            if spec.ring_only {
                disk.ring_only()
            } else {
                disk
            }
        })
        .and_then(|disk| match spec.sqpoll {
            Some(cpu) if !readonly => disk.sqpoll(cpu),
            _ => Ok(disk),
        })
        .map(|disk| {
            if spec.fixed_buffers {
                disk.fixed_buffers()
            } else {
                disk
            }
        })
        .map_err(|e| SpecError {
            key: if readonly && spec.base.is_some() {
                "base"
            } else {
                "path"
            }
            .into(),
            reason: format!("{}: {e}", path.display()),
        })
}

/// `path=DISK,base=BASE`: DISK (made empty if it does not exist) over BASE, read-only; or the
/// image (`source`), base and map a client passed (`thin`, which it made as this does).
fn open_thin_disk(
    spec: &DiskSpec,
    path: &Path,
    base: &BaseSpec,
    options: ThinOptions,
    mut source: Source,
) -> Result<ThinDisk, SpecError> {
    let error = |key: &str, e: std::io::Error| SpecError {
        key: key.into(),
        reason: format!("{}: {e}", path.display()),
    };
    let thin = source.thin.take();
    let backings = backings(source.backing.take());
    match (source.image.is_some(), thin) {
        (true, Some(thin)) => {
            let (base, files) = match (base, thin.base) {
                (BaseSpec::File(base), Some(files)) => (base, files),
                (BaseSpec::Nbd { uri, timeout }, None) => {
                    let base = NbdBase::connect(uri, *timeout).map_err(|e| error("base", e))?;
                    let data = open_file(spec, path, false, source)?;
                    return ThinDisk::open_over(
                        data,
                        path,
                        ThinBase::Nbd(Arc::new(base)),
                        Some(thin.map),
                        options,
                    )
                    .map_err(|e| error("base", e));
                }
                _ => {
                    let e = std::io::Error::other("a base file is passed for a file base only");
                    return Err(error("base", e));
                }
            };
            let confined = source.confined;
            let data = open_file(spec, path, false, source)?;
            let base_source = Source {
                image: Some(files),
                confined,
                ..Source::default()
            };
            let file = open_file(spec, base, true, base_source)?;
            let base = thin_base(file, base, backings).map_err(|e| error("base", e))?;
            return ThinDisk::open_over(data, path, base, Some(thin.map), options)
                .map_err(|e| error("base", e));
        }
        (false, None) => {}
        _ => {
            let e = std::io::Error::other("the image, its base and its map are passed together");
            return Err(error("base", e));
        }
    }
    let image = open_own_image(path, spec.direct).map_err(|e| error("path", e))?;
    let source = Source {
        image: Some(image),
        ..Source::default()
    };
    let data = open_file(spec, path, false, source)?;
    let base = match base {
        // The base is the data's ring's to read: its own ring options do not apply.
        BaseSpec::File(base) => {
            let file = open_file(spec, base, true, Source::default())?;
            thin_base(file, base, backings).map_err(|e| error("base", e))?
        }
        BaseSpec::Nbd { uri, timeout } => ThinBase::Nbd(Arc::new(
            NbdBase::connect(uri, *timeout).map_err(|e| error("base", e))?,
        )),
    };
    ThinDisk::open_over(data, path, base, None, options).map_err(|e| error("base", e))
}

/// A `base=` disk's DISK, made empty if missing: a file vbmq makes beside the base, so never
/// reached through a symbolic link and only a regular file of vbmq's user with one link (see
/// [`own_files`]); buffered, and with `direct`, with `O_DIRECT` too.
fn open_own_image(path: &Path, direct: bool) -> std::io::Result<(File, Option<File>)> {
    let buffered = own_files::open(path, Access::read_write(Create::IfMissing(0o600)))?;
    if !direct {
        return Ok((buffered, None));
    }
    let access = Access {
        direct: true,
        ..Access::read_write(Create::No)
    };
    let direct = own_files::open(path, access)?;
    let (a, b) = (buffered.metadata()?, direct.metadata()?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) {
        return Err(std::io::Error::other("replaced while it was being opened"));
    }
    Ok((buffered, Some(direct)))
}

/// A disk opened and bound.
pub(crate) struct Built {
    /// The server of its socket.
    pub server: DiskServer,
    /// The disk, to close at exit.
    pub disk: Arc<dyn Disk>,
    /// The verbs its layers answer.
    pub handles: Handles,
    /// The files it keeps reading (a Ceph configuration and keyring).
    pub files: Vec<PathBuf>,
}

/// The cache's name for a passed image: the file, as [`ImageId::of_file`] names it.
fn image_id(file: &File) -> std::io::Result<ImageId> {
    let metadata = file.metadata()?;
    Ok(if metadata.file_type().is_block_device() {
        ImageId::File(u64::MAX, metadata.rdev())
    } else {
        ImageId::File(metadata.dev(), metadata.ino())
    })
}

/// Opens a disk (from `source`) and binds its socket, or serves `listener`, a socket a client
/// bound and passed.
pub(crate) fn build_disk(
    spec: &DiskSpec,
    source: Source,
    listener: Option<UnixListener>,
) -> Result<Built, SpecError> {
    let mut handles = Handles::default();
    let (disk, files) = open_disk(spec, source, &mut handles)?;
    let kept = Arc::clone(&disk);
    let serial = spec.serial.clone().unwrap_or_else(|| default_serial(spec));
    let device = Arc::new(BlkDevice::new(
        disk.as_ref(),
        spec.readonly,
        u16::try_from(spec.queues).unwrap_or(u16::MAX),
        &serial,
    ));
    device.limits.set(spec.limits);
    device.set_writer_seat(handles.writer_seat.clone());
    let settings = (0..spec.queues)
        .map(|i| QueueSettings {
            mode: spec.mode,
            poll: Duration::from_micros(spec.poll_us),
            cpu: spec.cpus.get(i).copied(),
            batch: spec.batch,
            max_size: spec.queue_size,
        })
        .collect();
    let (mode, group) = (spec.socket_mode, spec.socket_group);
    match listener {
        Some(listener) => DiskServer::with_listener(&spec.socket, listener, device, disk, settings),
        None => DiskServer::bind(&spec.socket, mode, group, device, disk, settings),
    }
    .map(|server| Built {
        server: server.track_inflight(spec.inflight),
        disk: kept,
        handles,
        files,
    })
    .map_err(|e| SpecError {
        key: "socket".into(),
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_serial_is_the_end_of_the_file_name() {
        let spec = |path: &str| DiskSpec::parse(&format!("socket=/s,path={path}"), &[0]).unwrap();
        assert_eq!(default_serial(&spec("/images/vm1.raw")), "vm1.raw");
        assert_eq!(
            default_serial(&spec("/images/a-very-long-image-name-vm1.raw")),
            "ng-image-name-vm1.raw"[1..]
        );
        // Never a cut through a character.
        let serial = default_serial(&spec("/images/ééééééééééééééé.raw"));
        assert!(serial.len() <= 20 && serial.ends_with(".raw"), "{serial}");
    }

    #[test]
    fn a_layer_of_the_spec_is_in_the_disk_built() {
        let open = |text: &str| {
            let spec = DiskSpec::parse(&format!("socket=/s,{text}"), &[0]).unwrap();
            open_disk(&spec, Source::default(), &mut Handles::default())
                .unwrap()
                .0
        };
        assert!(open("mem=1M").supports_discard());
        assert!(!open("mem=1M,discard=off").supports_discard());
    }
}
