//! qcow2 images (`path=IMAGE`, `format=auto|raw|qcow2`): QEMU's image format, with backing
//! chains of any depth (qcow2 or raw), v2 and v3, clusters of 512 B to 2 MiB, zero clusters,
//! compressed clusters (deflate and zstd) and extended L2 entries (subclusters).
//!
//! The metadata layer is vbmq's own (`header`, `image`, `write`); the data of allocated
//! clusters moves through the queue's io_uring like a raw file's (see `engine`). Why not a
//! library: `imago` 0.2.6 (QEMU's block-layer maintainer) has the right shape (a guest-to-host
//! mapping API, `prepare_data_mapping`/`commit_data_mapping` for allocation) but refuses extended
//! L2 and zstd images and runs its metadata I/O as tokio futures, which vbmq's queue threads
//! would have to drive; `qcow2-rs` 0.1.6 (rublk) lacks extended L2 and zstd too, and brings
//! its own I/O stacks. What vbmq needs of the format (a lookup per request, an allocation that
//! orders its writes as QEMU does) is a few hundred lines checked against `qemu-img` itself
//! (tests/qcow2.rs).
//!
//! Below the top image every file of the chain is opened read-only (shared lock), its backing
//! file named relative to the image that names it, as QEMU resolves it (`chain`), or passed by
//! `vbmq ctl add-disk`, which walks the chain the same way. Images with an external data file
//! or encryption are refused; internal snapshots are left as they are (an image that has them
//! is served read-only). A qcow2 image is also a thin disk's base (`as_base`), and `create`
//! writes new ones (`vbmq image create`).

mod as_base;
mod bitmap_dir;
mod bitmaps;
mod chain;
mod compressed;
mod create;
mod engine;
mod header;
mod image;
mod probed_raw;
mod view;
mod write;

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

pub use self::as_base::thin_base;
use self::bitmaps::Qcow2Bitmaps;
pub use self::chain::{BackingFile, Backings, open_backing_files};
pub use self::create::{CreateOptions, create_image};
use self::engine::Qcow2Stage;
pub use self::header::has_magic;
use self::image::Qcow2Image;
use self::probed_raw::ProbedRaw;
pub use self::view::Qcow2Reader;
use self::write::Writer;
use super::changes::ImageBitmaps;
use super::layer::{Layered, StagedEngine};
use super::{Disk, Engine, EngineOptions, FileDisk, Geometry};

/// What `format=` says an image is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImageFormat {
    /// qcow2 if it starts with the qcow2 magic; a raw image must not (say `format=raw`).
    #[default]
    Auto,
    /// Raw bytes, whatever they start with.
    Raw,
    /// A qcow2 image.
    Qcow2,
}

impl ImageFormat {
    /// `auto`, `raw` or `qcow2`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "auto" => Some(Self::Auto),
            "raw" => Some(Self::Raw),
            "qcow2" => Some(Self::Qcow2),
            _ => None,
        }
    }

    /// Whether `file` is served as qcow2.
    pub fn is_qcow2(self, file: &File) -> io::Result<bool> {
        match self {
            Self::Raw => Ok(false),
            Self::Auto => has_magic(file),
            Self::Qcow2 if has_magic(file)? => Ok(true),
            Self::Qcow2 => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a qcow2 image (format=qcow2)",
            )),
        }
    }
}

/// The qcow2 disk `file` (opened at `path`, its chain from `backings`) holds, or `file` back
/// when `format` says it is raw.
pub fn open_qcow2(
    file: FileDisk,
    path: &Path,
    format: ImageFormat,
    readonly: bool,
    backings: Backings,
) -> io::Result<Result<Qcow2Disk, FileDisk>> {
    if !format.is_qcow2(&file.file()?)? {
        return Ok(Err(file));
    }
    let disk = Qcow2Disk::open(file, path, readonly, backings).map_err(|e| {
        if format == ImageFormat::Auto && e.kind() == io::ErrorKind::InvalidData {
            io::Error::new(
                e.kind(),
                format!(
                    "starts with the qcow2 magic but {e}: if it is a raw image, say format=raw"
                ),
            )
        } else {
            e
        }
    })?;
    Ok(Ok(disk))
}

/// A raw image's disk (`raw`, its snapshot layer) as `format` serves it: under `format=auto`,
/// writable, guarded so that no guest write makes it probe as qcow2 at the next start.
pub fn guard_probed_raw(raw: Arc<dyn Disk>, format: ImageFormat, readonly: bool) -> Arc<dyn Disk> {
    if format == ImageFormat::Auto && !readonly {
        Arc::new(Layered::new(raw, ProbedRaw))
    } else {
        raw
    }
}

/// A disk served from a qcow2 image and the chain below it.
pub struct Qcow2Disk {
    // Dropped in this order: the writer writes back the tables it holds in memory while
    // `file` still holds the image's lock, so no next opener reads them stale.
    writer: Option<Arc<Writer>>,
    image: Arc<Qcow2Image>,
    file: FileDisk,
}

impl Qcow2Disk {
    /// Serves the qcow2 image `file` (opened at `path`; its backing files from `backings`),
    /// writable unless `readonly`.
    pub fn open(
        file: FileDisk,
        path: &Path,
        readonly: bool,
        backings: Backings,
    ) -> io::Result<Self> {
        // Two writers of one image would each allocate from the end of the file they saw.
        if file.writer_seat().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "handover=on is for raw images: a qcow2 image has one writer",
            ));
        }
        let image = Arc::new(Qcow2Image::open(file.file()?, path, backings)?);
        let writer = if readonly {
            None
        } else {
            Some(Arc::new(Writer::open(image.clone())?))
        };
        Ok(Qcow2Disk {
            writer,
            image,
            file,
        })
    }

    /// The guest's view, for snapshots and exports; the chain's files are held as in use
    /// while it lives.
    pub fn reader(&self) -> io::Result<Qcow2Reader> {
        Qcow2Reader::new(self.image.clone())
    }
}

impl Disk for Qcow2Disk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.image.size(),
            ..self.file.geometry()
        }
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        // A read split by cluster is several operations in the ring.
        let ring_options = EngineOptions {
            depth: options.depth.saturating_mul(4),
            ..options
        };
        let ring = if self.file.is_pooled() {
            self.file
                .pooled_engine(ring_options, None)
                .unwrap_or_else(|| {
                    Err(io::Error::other(
                        "no spare io_uring ring left for a queue of a qcow2 disk added at run \
                         time (raise --run-time-rings)",
                    ))
                })?
        } else {
            self.file.uring_engine(ring_options, None)?
        };
        let stage = Qcow2Stage::new(self.image.clone(), self.writer.clone());
        Ok(Box::new(StagedEngine::new(stage, ring)))
    }

    fn supports_discard(&self) -> bool {
        self.writer.is_some()
    }

    /// A writable v3 image keeps `track-changes=on` checkpoints as its persistent bitmaps.
    fn image_bitmaps(&self) -> Option<Arc<dyn ImageBitmaps>> {
        let writer = self.writer.clone()?;
        (self.image.header.version >= 3)
            .then(|| Arc::new(Qcow2Bitmaps::new(self.image.clone(), writer)) as _)
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        super::check_resize(self.image.size(), bytes, 512, shrink)?;
        if bytes < self.image.size() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a qcow2 disk only grows",
            ));
        }
        let Some(writer) = &self.writer else {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a read-only qcow2 disk is not resized",
            ));
        };
        writer.grow(bytes)?;
        Ok(bytes)
    }
}
