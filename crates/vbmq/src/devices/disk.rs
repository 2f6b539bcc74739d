//! A disk from its spec: the storage (a file or block device, RBD, memory or null), the read
//! cache and the delay knob in front of it, the virtio-blk device, and its bound socket.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::cache::ImageId;
use crate::backend::{
    CachedDisk, Delay, Disk, EncryptedDisk, FileDisk, Layered, MemoryDisk, MirrorDisk, NullDisk,
    RbdDisk, SnapshotDisk, ThinDisk, ThinOptions, TrackedDisk,
};
use crate::config::{DiskSpec, SpecError, Storage};
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
    /// The process is confined: every queue does its I/O with positional system calls (no ring
    /// can be made), and an RBD image is opened only through a cluster connection made at start.
    pub confined: bool,
}

/// What a `base=` disk's client passed beside its image: the base (buffered and `O_DIRECT`)
/// and the map file, each checked (see `crate::passed_fds`).
pub(crate) struct PassedThin {
    /// The base, read-only.
    pub base: (File, Option<File>),
    /// `DISK.map`, read-write.
    pub map: File,
}

/// An open disk and the files it keeps reading (a Ceph configuration and keyring).
fn open_disk(spec: &DiskSpec, source: Source) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let (disk, files) = open_storage(spec, source)?;
    // The top of the stack: a mirror sends what the guest sees.
    let disk: Arc<dyn Disk> = Arc::new(MirrorDisk::new(disk));
    if spec.delay_us == 0 {
        return Ok((disk, files));
    }
    let delay = Duration::from_micros(spec.delay_us);
    let delayed: Arc<dyn Disk> = Arc::new(Layered::new(disk, Delay::new(delay, spec.delay_every)));
    Ok((delayed, files))
}

fn open_storage(
    spec: &DiskSpec,
    source: Source,
) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    if let Storage::Rbd(target) = &spec.storage {
        let opened = if source.confined {
            RbdDisk::open_connected(target, spec.readonly)
        } else {
            RbdDisk::open(target, spec.readonly)
        };
        let disk = opened.map_err(|e| SpecError {
            key: "rbd".into(),
            reason: format!("{}/{}: {e}", target.pool, target.image),
        })?;
        let files = disk.files().to_vec();
        let disk: Arc<dyn Disk> = Arc::new(disk);
        if spec.cache == 0 {
            return Ok((disk, files));
        }
        let name = format!("{}/{}/{}", target.pool, target.namespace, target.image);
        let id = ImageId::Rbd(format!("{}:{name}", target.conf.display()));
        let label = spec.socket.display().to_string();
        let cached =
            CachedDisk::open_image(disk, id, &name, spec.cache, &label).map_err(|e| SpecError {
                key: "cache".into(),
                reason: e.to_string(),
            })?;
        return Ok((Arc::new(cached), files));
    }
    open_local_disk(spec, source).map(|disk| (disk, Vec::new()))
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

fn open_local_disk(spec: &DiskSpec, source: Source) -> Result<Arc<dyn Disk>, SpecError> {
    match &spec.storage {
        Storage::File(path) => {
            let id = match &source.image {
                Some((image, _)) => Some(image_id(image).map_err(|e| SpecError {
                    key: "path".into(),
                    reason: format!("{}: {e}", path.display()),
                })?),
                None => None,
            };
            // Before the image is opened: opening it moves its modification time. A passed
            // image is asked through its descriptor, before vbmq writes or probes it.
            let Source {
                image,
                thin,
                key,
                changes,
                confined,
            } = source;
            let passed_image = image.as_ref().map(|(image, _)| image);
            let (mtime, tracked_files) = tracked_files(spec, path, passed_image, changes)?;
            let image = Source {
                image,
                confined,
                ..Source::default()
            };
            // Directly above the storage: a snapshot holds what the image holds.
            let disk: Arc<dyn Disk> = match &spec.base {
                Some(base) => {
                    SnapshotDisk::over_thin(open_thin_disk(spec, path, base, image, thin)?)
                }
                None => SnapshotDisk::over_file(open_file(spec, path, spec.readonly, image)?),
            }
            .map(Arc::new)
            .map_err(|e| SpecError {
                key: "path".into(),
                reason: format!("{}: {e}", path.display()),
            })?;
            // Above the snapshot layer: what reaches the storage is what changed.
            let disk: Arc<dyn Disk> = if spec.track_changes {
                let tracked = match tracked_files {
                    Some((image, changes)) => TrackedDisk::open_passed(
                        disk,
                        path,
                        image,
                        changes,
                        spec.track_block,
                        mtime,
                    ),
                    None => TrackedDisk::open(disk, path, spec.track_block, mtime),
                };
                Arc::new(tracked.map_err(|e| SpecError {
                    key: "track-changes".into(),
                    reason: format!("{}: {e}", path.display()),
                })?)
            } else {
                disk
            };
            // Under the cache: the cache holds plaintext, in vbmq's memory only.
            let disk: Arc<dyn Disk> = match (&spec.key_file, key) {
                (Some(path), passed) => {
                    let discard = spec.encrypt_discard;
                    let opened = match passed {
                        Some(file) => EncryptedDisk::with_key_from(disk, file, discard),
                        None => EncryptedDisk::open(disk, path, discard),
                    };
                    Arc::new(opened.map_err(|e| SpecError {
                        key: "key-file".into(),
                        reason: format!("{}: {e}", path.display()),
                    })?)
                }
                (None, _) => disk,
            };
            if spec.cache == 0 {
                return Ok(disk);
            }
            let label = spec.socket.display().to_string();
            let cached = match id {
                Some(id) => {
                    let name = path.display().to_string();
                    CachedDisk::open_image(disk, id, &name, spec.cache, &label)
                }
                None => CachedDisk::open(disk, path, spec.cache, &label),
            }
            .map_err(|e| SpecError {
                key: "cache".into(),
                reason: e.to_string(),
            })?;
            if spec.cache_preload {
                cached.preload(path).map_err(|e| SpecError {
                    key: "cache-preload".into(),
                    reason: format!("{}: {e}", path.display()),
                })?;
            }
            Ok(Arc::new(cached))
        }
        Storage::Null(size) => Ok(Arc::new(NullDisk::new(*size))),
        Storage::Memory { size, image } => {
            let disk = match image {
                Some(image) => MemoryDisk::load(*size, image),
                None => MemoryDisk::new(*size),
            };
            disk.map(|disk| Arc::new(disk) as Arc<dyn Disk>)
                .map_err(|e| match image {
                    Some(image) => SpecError {
                        key: "image".into(),
                        reason: format!("{}: {e}", image.display()),
                    },
                    None => SpecError {
                        key: "mem".into(),
                        reason: e.to_string(),
                    },
                })
        }
        Storage::Rbd(_) => Err(SpecError {
            key: "rbd".into(),
            reason: "opened by open_disk: a defect".into(),
        }),
    }
}

/// A tracked disk's image time, taken before it is opened, and for a passed image, a copy of
/// its descriptor and the map file passed with it (which it needs: a passed image is never
/// tracked from a map file opened here).
type TrackedFiles = (Option<(i64, i64)>, Option<(File, File)>);

fn tracked_files(
    spec: &DiskSpec,
    path: &Path,
    image: Option<&File>,
    changes: Option<File>,
) -> Result<TrackedFiles, SpecError> {
    let error = |e: std::io::Error| SpecError {
        key: "track-changes".into(),
        reason: format!("{}: {e}", path.display()),
    };
    let Some(image) = image else {
        return Ok((crate::backend::changes::image_mtime(path), None));
    };
    if !spec.track_changes {
        return Ok((None, None));
    }
    let mtime = crate::backend::changes::file_mtime(image);
    let Some(changes) = changes else {
        let e =
            std::io::Error::other("a passed image is tracked only with its DISK.changes passed");
        return Err(error(e));
    };
    let image = image.try_clone().map_err(error)?;
    Ok((mtime, Some((image, changes))))
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
    base: &Path,
    source: Source,
    thin: Option<PassedThin>,
) -> Result<ThinDisk, SpecError> {
    let error = |key: &str, e: std::io::Error| SpecError {
        key: key.into(),
        reason: format!("{}: {e}", path.display()),
    };
    let options = ThinOptions {
        block_size: spec.base_block,
        copy_on_read: spec.base_copy_on_read,
        fill: spec.base_fill,
    };
    match (source.image.is_some(), thin) {
        (true, Some(thin)) => {
            let confined = source.confined;
            let data = open_file(spec, path, false, source)?;
            let base_source = Source {
                image: Some(thin.base),
                confined,
                ..Source::default()
            };
            let base = open_file(spec, base, true, base_source)?;
            return ThinDisk::open(data, path, base, Some(thin.map), options)
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
    // The base is the data's ring's to read: its own ring options do not apply.
    let base = open_file(spec, base, true, Source::default())?;
    ThinDisk::open(data, path, base, None, options).map_err(|e| error("base", e))
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

/// The server of one disk, the disk (to close at exit) and the files it keeps reading.
pub(crate) type Built = (DiskServer, Arc<dyn Disk>, Vec<PathBuf>);

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
    let (disk, files) = open_disk(spec, source)?;
    let kept = Arc::clone(&disk);
    let serial = spec.serial.clone().unwrap_or_else(|| default_serial(spec));
    let device = Arc::new(BlkDevice::new(
        disk.as_ref(),
        spec.readonly,
        u16::try_from(spec.queues).unwrap_or(u16::MAX),
        &serial,
    ));
    device.limits.set(spec.limits);
    device.set_writer_seat(disk.writer_seat());
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
    .map(|server| (server.track_inflight(spec.inflight), kept, files))
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
}
