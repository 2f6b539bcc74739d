//! `track-changes=on`: which blocks changed since a named instant (a checkpoint, or a
//! snapshot), for incremental backups.
//!
//! A [`TrackedDisk`] sits directly on the storage (a file, or a `base=` thin disk), under
//! encryption and the cache, and keeps up to 16 named bitmaps ([`ChangeMap`]), one bit per
//! `track-block=` bytes (64 KiB by default). Every write, write-zeroes and discard sets its
//! blocks' bits in every live map before it is handed to the storage, so a map never lacks a
//! block that changed (it may hold one whose write failed).
//!
//! Cost on the I/O path: one atomic load per write when no map is live; else one more (the
//! bitmaps of the disk's current size, see `bitmaps.rs`), and per live map and per 64 blocks
//! covered, one relaxed load and an atomic `fetch_or` only when a bit is still
//! clear (repeated writes to the same blocks only read). No lock, no system call, no
//! allocation; reads and flushes pay nothing.
//!
//! Persistence, after QEMU's persistent dirty bitmaps: the maps live in `DISK.changes` beside
//! the image (made or opened at start, before the process is confined; for a disk added at run
//! time, `vbmq ctl add-disk` opens it and passes it). At start vbmq reads
//! it; a file still marked "in use" (vbmq was killed or crashed), damaged, or describing
//! another size, or an image modified since the clean close, turns every map it holds invalid
//! (kept by name: asking for it says why, and never gives extents). Then the file is marked
//! "in use" and flushed before any request is served; `begin` and `forget` rewrite its header
//! (flushed). A clean stop (SIGTERM, `remove-disk`) writes the bitmaps, flushes, then marks
//! the file clean and flushes again. A tracked disk grows (the grown blocks count as changed in
//! every live map; the file records the new size), never shrinks.
//!
//! On a writable v3 qcow2 image the maps are kept in the image instead, as its persistent
//! dirty bitmaps ([`ImageBitmaps`], `backend/qcow2/bitmaps.rs`): QEMU reads and writes them too.

mod bitmaps;
mod engine;
mod file;
mod in_image;
mod map;

pub use self::file::{Invalid, MAX_MAPS, valid_name};
pub use self::in_image::{ImageBitmaps, ImageMap, ImageMaps};
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

pub use self::map::{ChangeError, ChangeMap, Changes, Checkpoint, ImageFile, changes_path};
use super::write_hook::HookedEngine;
use super::{Disk, Engine, EngineOptions, Geometry};

/// Refuses an image that is not a regular file: its map lives beside it.
fn regular(image_file: &ImageFile) -> io::Result<()> {
    if image_file.is_regular()? {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        "track-changes=on needs a regular image file (its map lives beside it)",
    ))
}

/// A disk whose changed blocks are recorded in named maps.
pub struct TrackedDisk {
    inner: Arc<dyn Disk>,
    map: Arc<ChangeMap>,
}

impl TrackedDisk {
    /// Tracks `inner`, the storage of the regular file `image`, with its map file beside it.
    /// `block_size`: `track-block=`, or the file's, or 64 KiB. `image_file`: the image at
    /// `image`, opened before `inner` was.
    pub fn open(
        inner: Arc<dyn Disk>,
        image: &Path,
        image_file: ImageFile,
        block_size: Option<u64>,
    ) -> io::Result<Self> {
        regular(&image_file)?;
        let capacity = inner.geometry().capacity;
        let map = match inner.image_bitmaps() {
            Some(store) => ChangeMap::in_image(store, image, capacity, block_size)?,
            None => ChangeMap::open(image, image_file, capacity, block_size)?,
        };
        Ok(TrackedDisk {
            inner,
            map: Arc::new(map),
        })
    }

    /// As [`TrackedDisk::open`], from the files a client passed (`vbmq ctl add-disk`): the
    /// image `image_file` (a regular file, at `image`; taken before `inner` was opened from it)
    /// and its map file `changes`, checked.
    pub fn open_passed(
        inner: Arc<dyn Disk>,
        image: &Path,
        image_file: ImageFile,
        changes: File,
        block_size: Option<u64>,
    ) -> io::Result<Self> {
        regular(&image_file)?;
        let capacity = inner.geometry().capacity;
        let path = changes_path(image);
        // A qcow2 image keeps its maps itself; the map file passed is left as it is.
        let map = match inner.image_bitmaps() {
            Some(store) => ChangeMap::in_image(store, image, capacity, block_size)?,
            None => ChangeMap::from_files(changes, image_file, path, capacity, block_size)?,
        };
        Ok(TrackedDisk {
            inner,
            map: Arc::new(map),
        })
    }

    /// The changed-block maps, for the disk's handles.
    pub fn map(&self) -> Arc<ChangeMap> {
        self.map.clone()
    }
}

impl Drop for TrackedDisk {
    /// A disk dropped without [`Disk::close`] (start refused for another disk, say) closes its
    /// maps cleanly if no engine holds them: none can mark a block any more. Otherwise the file
    /// stays "in use", and the maps turn invalid at the next start.
    fn drop(&mut self) {
        if Arc::strong_count(&self.map) == 1 {
            self.map.close();
        }
    }
}

impl Disk for TrackedDisk {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(HookedEngine::new(
            self.inner.engine(options)?,
            self.map.clone(),
        )))
    }

    fn supports_discard(&self) -> bool {
        self.inner.supports_discard()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut stats = self.inner.stats();
        let checkpoints = self.map.checkpoints();
        let invalid = checkpoints.iter().filter(|c| c.invalid.is_some()).count();
        stats.push(("checkpoints", checkpoints.len() as u64));
        stats.push(("checkpoints_invalid", invalid as u64));
        stats
    }

    /// Grows only: the grown blocks count as changed in every live map. A shrink is refused
    /// (a map would lose blocks that changed).
    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        if bytes < self.map.capacity() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a disk with track-changes=on does not shrink: its changed-block maps cover \
                 its whole size",
            ));
        }
        if !self.map.can_grow() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a disk with track-changes=on grows at most 8 times while open: remove-disk \
                 and add-disk it (or restart vbmq) first",
            ));
        }
        let now = self.inner.resize(bytes, shrink)?;
        self.map.grow(now)?;
        Ok(now)
    }

    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        self.inner.on_resize(listener);
    }

    fn close(&self) {
        self.inner.close();
        self.map.close();
    }
}
