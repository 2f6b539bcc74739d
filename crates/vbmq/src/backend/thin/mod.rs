//! `base=`: a thin disk over a read-only base image.
//!
//! DISK holds only the blocks written (or copied) since it was made; every other block reads
//! from BASE, which vbmq opens read-only (shared lock: any number of disks and processes may
//! use it) and never writes. Blocks are `base-block=` bytes (64 KiB by default); a write to part
//! of a block DISK lacks first copies the rest of that block from BASE. Which blocks DISK holds
//! is recorded in `DISK.map` (see [`map`] for the format and the order of writes).
//!
//! Promise: a write is acknowledged only once its data and, for a block newly copied, the
//! block's map bit are both flushed (data first), so neither `kill -9` nor a power failure at
//! any instant loses an acknowledged write or shows a half-copied block; writes to blocks DISK
//! already holds keep the plain disk's promise (durable after a guest flush). The cost: a pass
//! of the queue that completes first writes to blocks pays two `fdatasync` and one `pwrite`,
//! once for all of them; reads, and writes to blocks DISK holds, pay one bitmap lookup per
//! block and no system call. Write-zeroes records the blocks it covers whole as DISK's (zeroed
//! there); discard is advisory and leaves the map as it is.

mod base;
mod engine;
mod fill;
mod map;
mod nbd_base;
mod read;
mod remote;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use self::base::{BaseImage, ThinBase, read_or_zeros};
use self::engine::ThinStage;
use self::map::ThinMap;
pub use self::map::map_path;
pub use self::nbd_base::NbdBase;
pub use self::read::ThinReader;
use self::remote::{BaseSource, ThinBelow};
use super::layer::StagedEngine;
use super::{Disk, Engine, EngineOptions, FileDisk, Geometry};

/// Whether `file` starts with the qcow2 magic (`QFI\xfb`; qcow2's own check is in
/// `backend/qcow2`, which reads through this module).
fn starts_as_qcow2(file: &File) -> io::Result<bool> {
    let mut magic = [0; 4];
    match file.read_exact_at(&mut magic, 0) {
        Ok(()) => Ok(magic == *b"QFI\xfb"),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// What a thin disk does besides serving.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThinOptions {
    /// Bytes per block (`base-block=`); `None`: the map's, or 64 KiB for a new disk.
    pub block_size: Option<u64>,
    /// Copy the blocks a read fetches from BASE into DISK (`base-copy-on-read=on`).
    pub copy_on_read: bool,
    /// Copy every block into DISK in the background (`base-fill=on`).
    pub fill: bool,
}

/// A disk whose unwritten blocks read from a base image.
pub struct ThinDisk {
    data: FileDisk,
    base: ThinBase,
    map: Arc<ThinMap>,
    geometry: Geometry,
    copy_on_read: bool,
    stop_fill: Arc<AtomicBool>,
    filler: Mutex<Option<JoinHandle<()>>>,
}

impl ThinDisk {
    /// Serves `data` (the writable DISK file at `path`) over `base`, opening or making its map
    /// (`DISK.map`), or with `map`, the map file a client opened and passed (see
    /// [`ThinMap::open_passed`]).
    pub fn open(
        data: FileDisk,
        path: &Path,
        base: FileDisk,
        map: Option<File>,
        options: ThinOptions,
    ) -> io::Result<Self> {
        Self::open_over(data, path, ThinBase::File(base), map, options)
    }

    /// As [`ThinDisk::open`], over a base of any kind (an NBD export: its size is the disk's).
    pub fn open_over(
        data: FileDisk,
        path: &Path,
        base: ThinBase,
        map: Option<File>,
        options: ThinOptions,
    ) -> io::Result<Self> {
        if let ThinBase::File(file) = &base {
            refuse_qcow2(file)?;
        }
        let base_geometry = match &base {
            ThinBase::File(file) => file.geometry(),
            ThinBase::Image(image) => Geometry {
                capacity: image.size(),
                ..data.geometry()
            },
            ThinBase::Nbd(nbd) => Geometry {
                capacity: nbd.size(),
                ..data.geometry()
            },
        };
        let block_size = data.geometry().block_size.max(base_geometry.block_size);
        if let Some(bs) = options.block_size
            && (!bs.is_power_of_two() || !(4096..=(16 << 20)).contains(&bs))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "base-block must be a power of two from 4K to 16M",
            ));
        }
        let capacity = base_geometry.capacity;
        let map = match map {
            Some(map) => ThinMap::open_passed(
                map,
                &map_path(path),
                data.file()?,
                capacity,
                options.block_size,
            )?,
            None => ThinMap::open(path, data.file()?, capacity, options.block_size)?,
        };
        if !map.block_size().is_multiple_of(u64::from(block_size)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("base-block is not a multiple of the {block_size}-byte sector"),
            ));
        }
        let map = Arc::new(map);
        let stop_fill = Arc::new(AtomicBool::new(false));
        let filler = if options.fill {
            Some(fill::start(
                map.clone(),
                base.reader()?,
                data.file()?,
                stop_fill.clone(),
                path.display().to_string(),
            )?)
        } else {
            None
        };
        Ok(ThinDisk {
            geometry: Geometry {
                capacity: map.disk_capacity(),
                block_size,
                ..base_geometry
            },
            data,
            base,
            map,
            copy_on_read: options.copy_on_read,
            stop_fill,
            filler: Mutex::new(filler),
        })
    }

    /// A reader of the disk's contents on the caller's thread (for snapshots).
    pub fn reader(&self) -> io::Result<ThinReader> {
        Ok(ThinReader::new(
            self.map.clone(),
            self.data.file()?,
            self.base.reader()?,
        ))
    }

    /// Whether the background fill is still the disk's (not stopped by [`Disk::close`]).
    #[cfg(test)]
    pub(crate) fn filling(&self) -> bool {
        self.filler
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn stop_filling(&self) {
        self.stop_fill.store(true, Ordering::Relaxed);
        let filler = self.filler.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(filler) = filler
            && filler.join().is_err()
        {
            tracing::error!("thin disk: the background fill panicked");
        }
    }
}

impl Disk for ThinDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.map.disk_capacity(),
            ..self.geometry
        }
    }

    /// Grows the disk past its base: blocks past the base's end are DISK's, reading zeros
    /// until written (see [`ThinMap::grow`]).
    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        let block = u64::from(self.geometry.block_size);
        super::check_resize(self.map.disk_capacity(), bytes, block, shrink)?;
        self.map.grow(bytes)
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        // A request split by block is several operations in the ring.
        let ring_options = EngineOptions {
            depth: options.depth.saturating_mul(4),
            ..options
        };
        let (base, remote) = match &self.base {
            ThinBase::File(file) => (Some(file.as_base()?), None),
            ThinBase::Image(image) => (None, Some(BaseSource::Image(image.clone()))),
            ThinBase::Nbd(nbd) => (None, Some(BaseSource::Nbd(nbd.clone()))),
        };
        // Added once the process is confined: no ring can be made, a spare one is taken.
        let ring = if self.data.is_pooled() {
            self.data
                .pooled_engine(ring_options, base)
                .unwrap_or_else(|| {
                    Err(io::Error::other(
                        "no spare io_uring ring left for a queue of a base= disk added at run                          time (raise --run-time-rings)",
                    ))
                })?
        } else {
            self.data.uring_engine(ring_options, base)?
        };
        let stage = ThinStage::new(self.map.clone(), self.copy_on_read);
        Ok(Box::new(StagedEngine::new(
            stage,
            ThinBelow::new(ring, remote)?,
        )))
    }

    fn supports_discard(&self) -> bool {
        self.data.supports_discard()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut stats = vec![
            ("thin_blocks", self.map.blocks()),
            ("thin_present_blocks", self.map.present_count()),
        ];
        // Added at run time: its queues on spare rings.
        stats.extend(self.data.stats());
        stats
    }

    fn close(&self) {
        self.stop_filling();
    }
}

impl Drop for ThinDisk {
    fn drop(&mut self) {
        self.stop_filling();
    }
}

/// A file base's bytes are served as they are: a qcow2 image's would show the guest its
/// tables. A qcow2 BASE comes as [`ThinBase::Image`] (`backend::qcow2::thin_base`).
fn refuse_qcow2(base: &FileDisk) -> io::Result<()> {
    if starts_as_qcow2(&base.file()?)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "BASE is a qcow2 image opened as raw bytes: it is read through its qcow2 reader \
             (the caller's defect)",
        ));
    }
    Ok(())
}
