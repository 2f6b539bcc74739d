//! The named maps of one disk: one bitmap each (a bit per block, set by every write), and
//! their file `DISK.changes` (see [`super::file`] for its format).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::held_files::{self, Held};
use crate::own_files::{self, Access, Create};

use super::bitmaps::{Generation, Generations, set_range};
use super::file::{CLEAN, Entry, HEADER, Header, IN_USE, Invalid, MAX_MAPS, checksum, valid_name};
use super::in_image::ImageBitmaps;

/// Why a map request was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// No map has this name.
    #[error("no checkpoint named {0:?} on this disk")]
    Unknown(String),
    /// The map cannot be trusted: no extents are given.
    #[error(
        "invalid: {reason} since {name}; take a full backup and a new snapshot (or checkpoint)"
    )]
    Invalid {
        /// The map's name.
        name: String,
        /// What happened.
        reason: &'static str,
    },
    /// The request cannot be done (a bad or taken name, no room).
    #[error("{0}")]
    Refused(String),
    /// `DISK.changes` could not be written.
    #[error("DISK.changes: {0}")]
    Io(#[from] io::Error),
}

/// The blocks changed since a named map began.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changes {
    /// The map's name.
    pub name: String,
    /// Bytes per block.
    pub block_size: u64,
    /// The disk's capacity in bytes.
    pub capacity: u64,
    /// Changed ranges as (offset, length) in bytes, sorted, adjacent blocks merged; the last
    /// block's range ends at the capacity.
    pub extents: Vec<(u64, u64)>,
}

/// A named map as `list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its name.
    pub name: String,
    /// Why it cannot be trusted, if it cannot.
    pub invalid: Option<&'static str>,
}

/// Where the maps are kept between runs.
enum Store {
    /// `DISK.changes`, and the image, whose modification time a clean close records.
    File { file: File, image: File },
    /// The image itself (a qcow2 image's persistent bitmaps).
    Image(Arc<dyn ImageBitmaps>),
}

/// The store and the names, changed only under their lock (never on the I/O path).
struct Names {
    store: Store,
    slots: [Option<Entry>; MAX_MAPS],
    /// Names the store holds for something else: no map takes them.
    reserved: Vec<String>,
    closed: bool,
}

/// The changed-block maps of one disk.
pub struct ChangeMap {
    block_size: u64,
    /// Slots every write marks (live and valid): bit `i` is slot `i`.
    active: AtomicU32,
    /// Each slot's bitmap, per size the disk has had while open.
    bits: Generations,
    names: Mutex<Names>,
    path: PathBuf,
    /// The map file is in use: no snapshot is written into it.
    _held: Option<Held>,
}

/// The map file of the disk at `image`: `IMAGE.changes`.
pub fn changes_path(image: &Path) -> PathBuf {
    let mut name = image.as_os_str().to_owned();
    name.push(".changes");
    PathBuf::from(name)
}

fn check_block_size(block_size: Option<u64>) -> io::Result<()> {
    match block_size {
        Some(bs) if !bs.is_power_of_two() || !(4096..=(16 << 20)).contains(&bs) => {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "track-block must be a power of two from 4K to 16M",
            ))
        }
        _ => Ok(()),
    }
}

fn mtime(file: &File) -> io::Result<(i64, i64)> {
    let meta = file.metadata()?;
    Ok((meta.mtime(), meta.mtime_nsec()))
}

/// A tracked disk's image, open, with its modification time read through this descriptor
/// (`fstat`) when it was opened, before vbmq writes or probes the image (a probe with
/// `fallocate` moves it). Never through the image's path: by the time the map checks it, the
/// path may lead to another file.
pub struct ImageFile {
    file: File,
    mtime: Option<(i64, i64)>,
}

impl ImageFile {
    /// `file`, the image, with its time now (`None` if `fstat` fails: the maps turn invalid).
    pub fn new(file: File) -> Self {
        let mtime = mtime(&file).ok();
        ImageFile { file, mtime }
    }

    /// The image at `path`, which did not exist before vbmq opened the disk (a `base=` disk
    /// made empty): it has no time, so any map file beside it is invalid.
    pub fn made(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        Ok(ImageFile { file, mtime: None })
    }

    /// Whether the image is a regular file (its map lives beside it).
    pub fn is_regular(&self) -> io::Result<bool> {
        Ok(self.file.metadata()?.is_file())
    }
}

impl ChangeMap {
    /// Opens `IMAGE.changes` beside `image` (a disk of `capacity` bytes), or makes it. Maps
    /// the file cannot vouch for are kept by name, invalid; a file that cannot be read at all
    /// is said in the log and started afresh. Then the file says "in use", flushed, before
    /// any write is served. `block_size`: asked for (`track-block=`), or the file's, or 64 KiB.
    /// `image_file`: the image at `image`, opened before vbmq wrote or probed it.
    pub fn open(
        image: &Path,
        image_file: ImageFile,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<ChangeMap> {
        let path = changes_path(image);
        // Not through a symbolic link, and only a regular file of vbmq's: it may run as root.
        let file = own_files::open(&path, Access::read_write(Create::IfMissing(0o600)))
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Self::from_files(file, image_file, path, capacity, block_size)
    }

    /// As [`ChangeMap::open`], from files already open: `file` the map file at `path`
    /// (read-write; a regular file), `image_file` the image (its time is checked now and
    /// recorded at a clean close). A confined vbmq serves a disk added at run time so, from what `vbmq ctl` passed.
    pub fn from_files(
        file: File,
        image_file: ImageFile,
        path: PathBuf,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<ChangeMap> {
        check_block_size(block_size)?;
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        let (header, bitmaps) =
            super::file::load(&file, &path, image_file.mtime, capacity, block_size);
        let block_size = header.block_size;
        let generation = Generation::new(capacity, block_size)?;
        let words = generation.words;
        let held = held_files::hold(&file)?;
        let map = ChangeMap {
            block_size,
            active: AtomicU32::new(0),
            bits: Generations::new(generation),
            names: Mutex::new(Names {
                store: Store::File {
                    file,
                    image: image_file.file,
                },
                slots: std::array::from_fn(|_| None),
                reserved: Vec::new(),
                closed: false,
            }),
            path,
            _held: Some(held),
        };
        let mut names = map.lock();
        for (k, entry) in header.entries.into_iter().enumerate() {
            if entry.invalid.is_none() {
                let bits = map.bits.current().bitmap(k);
                let raw = bitmaps
                    .get(k * words * 8..(k + 1) * words * 8)
                    .unwrap_or(&[]);
                for (w, bytes) in bits.iter().zip(raw.chunks_exact(8)) {
                    let mut word = [0u8; 8];
                    word.copy_from_slice(bytes);
                    w.store(u64::from_le_bytes(word), Ordering::Relaxed);
                }
                map.active.fetch_or(1 << k, Ordering::Release);
            }
            names.slots[k] = Some(entry);
        }
        map.persist(&names)?;
        drop(names);
        Ok(map)
    }

    /// The maps `store` (the image at `image`) holds, for a disk of `capacity` bytes: loaded,
    /// and marked in use in the image before any write is served. `block_size`: asked for
    /// (`track-block=`), or the image's, or 64 KiB.
    pub fn in_image(
        store: Arc<dyn ImageBitmaps>,
        image: &Path,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<ChangeMap> {
        check_block_size(block_size)?;
        let loaded = store.load(capacity, block_size)?;
        let generation = Generation::new(capacity, loaded.block_size)?;
        let map = ChangeMap {
            block_size: loaded.block_size,
            active: AtomicU32::new(0),
            bits: Generations::new(generation),
            names: Mutex::new(Names {
                store: Store::Image(store),
                slots: std::array::from_fn(|_| None),
                reserved: loaded.reserved,
                closed: false,
            }),
            path: image.to_path_buf(),
            _held: None,
        };
        let mut names = map.lock();
        for (k, image_map) in loaded.maps.into_iter().take(MAX_MAPS).enumerate() {
            if image_map.invalid.is_none() {
                let bits = map.bits.current().bitmap(k);
                for (w, word) in bits.iter().zip(image_map.bits) {
                    w.store(word, Ordering::Relaxed);
                }
                map.active.fetch_or(1 << k, Ordering::Release);
            }
            names.slots[k] = Some(Entry {
                name: image_map.name,
                invalid: image_map.invalid,
            });
        }
        drop(names);
        Ok(map)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn header(
        &self,
        names: &Names,
        state: u32,
        bitmaps_sum: u64,
        image_mtime: (i64, i64),
    ) -> Header {
        Header {
            state,
            block_size: self.block_size,
            capacity: self.capacity(),
            entries: names.slots.iter().flatten().cloned().collect(),
            bitmaps_sum,
            image_mtime,
        }
    }

    /// Writes the header as "in use" with the names of now, and flushes it.
    fn persist(&self, names: &Names) -> io::Result<()> {
        // In the image: names reach it at the clean close.
        let Store::File { file, .. } = &names.store else {
            return Ok(());
        };
        let header = self.header(names, IN_USE, 0, (0, 0));
        file.write_all_at(&header.encode(), 0)?;
        file.sync_data()
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The disk's capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.bits.current().capacity
    }

    /// The map file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks the blocks of `len` bytes at `offset` changed in every live map: one atomic load
    /// when no map is live; else per map and 64-block word, a load, and a `fetch_or` only if
    /// a bit is still clear. No lock, no system call.
    pub fn mark(&self, offset: u64, len: u64) {
        let mut active = self.active.load(Ordering::Acquire);
        if active == 0 || len == 0 {
            return;
        }
        let bitmaps = self.bits.current();
        let first = offset / self.block_size;
        if first >= bitmaps.blocks {
            return;
        }
        let last = (offset.saturating_add(len - 1) / self.block_size).min(bitmaps.blocks - 1);
        while active != 0 {
            let slot = active.trailing_zeros() as usize;
            active &= active - 1;
            if let Some(bits) = bitmaps.existing(slot) {
                set_range(bits, first, last);
            }
        }
    }

    /// Starts an empty map named `name` at this instant: every write pushed after this returns
    /// is in it (one in flight now may not be). The name is recorded in the file (flushed)
    /// first. With a snapshot: call it before the snapshot's instant, and let the writes in
    /// flight now complete before that instant; then every write is in the snapshot or the map.
    pub fn begin(&self, name: &str) -> Result<(), ChangeError> {
        if !valid_name(name) {
            return Err(ChangeError::Refused(format!(
                "{name:?}: a checkpoint name is 1 to 64 of A-Z a-z 0-9 . _ -"
            )));
        }
        let mut names = self.lock();
        if names.closed {
            return Err(ChangeError::Refused("the disk is closing".into()));
        }
        if names.reserved.iter().any(|r| r == name) {
            return Err(ChangeError::Refused(format!(
                "the image holds a bitmap named {name:?} that is not a checkpoint"
            )));
        }
        if names.slots.iter().flatten().any(|e| e.name == name) {
            return Err(ChangeError::Refused(format!(
                "a checkpoint named {name:?} exists: forget it first"
            )));
        }
        let Some(k) = names.slots.iter().position(Option::is_none) else {
            return Err(ChangeError::Refused(format!(
                "{MAX_MAPS} checkpoints already: forget one first"
            )));
        };
        // A write that saw the slot live before a `forget` may still set bits in it: cleared
        // here, at worst a block more is reported, never one less.
        self.bits.clear(k);
        names.slots[k] = Some(Entry {
            name: name.to_string(),
            invalid: None,
        });
        if let Err(e) = self.persist(&names) {
            names.slots[k] = None;
            return Err(e.into());
        }
        self.active.fetch_or(1 << k, Ordering::AcqRel);
        Ok(())
    }

    /// The blocks written (or zeroed, or discarded) since `name` began.
    pub fn changed_since(&self, name: &str) -> Result<Changes, ChangeError> {
        let names = self.lock();
        let (k, entry) = names
            .slots
            .iter()
            .enumerate()
            .find_map(|(k, e)| e.as_ref().filter(|e| e.name == name).map(|e| (k, e)))
            .ok_or_else(|| ChangeError::Unknown(name.to_string()))?;
        if let Some(why) = entry.invalid {
            return Err(ChangeError::Invalid {
                name: name.to_string(),
                reason: why.reason(),
            });
        }
        let mut extents: Vec<(u64, u64)> = Vec::new();
        let mut run: Option<u64> = None;
        let bitmaps = self.bits.current();
        let close = |start: u64, end: u64, extents: &mut Vec<(u64, u64)>| {
            let (from, to) = (
                start * self.block_size,
                (end * self.block_size).min(bitmaps.capacity),
            );
            extents.push((from, to - from));
        };
        for w in 0..bitmaps.words {
            let word = self.bits.word(k, w);
            if (word == 0 && run.is_none()) || (word == u64::MAX && run.is_some()) {
                continue;
            }
            for bit in 0..64 {
                let block = w as u64 * 64 + bit;
                match (word >> bit & 1 != 0, run) {
                    (true, None) => run = Some(block),
                    (false, Some(start)) => {
                        close(start, block, &mut extents);
                        run = None;
                    }
                    _ => {}
                }
            }
        }
        if let Some(start) = run {
            close(start, bitmaps.blocks, &mut extents);
        }
        Ok(Changes {
            name: name.to_string(),
            block_size: self.block_size,
            capacity: bitmaps.capacity,
            extents,
        })
    }

    /// Forgets the map `name`.
    pub fn forget(&self, name: &str) -> Result<(), ChangeError> {
        let mut names = self.lock();
        let k = names
            .slots
            .iter()
            .position(|e| e.as_ref().is_some_and(|e| e.name == name))
            .ok_or_else(|| ChangeError::Unknown(name.to_string()))?;
        self.active.fetch_and(!(1 << k), Ordering::AcqRel);
        names.slots[k] = None;
        self.persist(&names)?;
        Ok(())
    }

    /// The maps, with why each cannot be trusted if it cannot.
    pub fn checkpoints(&self) -> Vec<Checkpoint> {
        self.lock()
            .slots
            .iter()
            .flatten()
            .map(|e| Checkpoint {
                name: e.name.clone(),
                invalid: e.invalid.map(Invalid::reason),
            })
            .collect()
    }

    /// Whether the disk may grow once more while open (each grow keeps the bitmaps of the size
    /// before until the disk closes).
    pub fn can_grow(&self) -> bool {
        self.bits.can_grow()
    }

    /// The disk grew to `capacity` bytes: every live map's bitmap grows, the grown blocks
    /// marked changed in each, and the file records the new size ("in use", flushed). Refused
    /// (before the storage grows, see [`ChangeMap::can_grow`]) only when grown too often.
    pub fn grow(&self, capacity: u64) -> io::Result<()> {
        let names = self.lock();
        if names.closed {
            return Err(io::Error::other("the disk is closing"));
        }
        let live = self.active.load(Ordering::Acquire);
        self.bits.grow(capacity, self.block_size, live)?;
        // The maps are grown; a clean close records the size even if this write fails.
        if let Err(e) = self.persist(&names) {
            tracing::warn!("{}: cannot record the new size: {e}", self.path.display());
        }
        Ok(())
    }

    /// At a clean stop, once no write can come: writes every bitmap, flushes, then marks the
    /// file clean (with the image's modification time) and flushes again. Once only.
    pub fn close(&self) {
        let mut names = self.lock();
        if names.closed {
            return;
        }
        names.closed = true;
        self.active.store(0, Ordering::Release);
        if let Err(e) = self.write_clean(&names) {
            tracing::error!(
                "{}: cannot be closed cleanly ({e}): its checkpoints will be invalid",
                self.path.display()
            );
        }
    }

    fn write_clean(&self, names: &Names) -> io::Result<()> {
        let words = self.bits.current().words;
        let (file, image) = match &names.store {
            Store::File { file, image } => (file, image),
            Store::Image(store) => {
                let maps: Vec<(String, Option<Vec<u64>>)> = names
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(|(k, e)| {
                        let e = e.as_ref()?;
                        let bits = e
                            .invalid
                            .is_none()
                            .then(|| (0..words).map(|w| self.bits.word(k, w)).collect());
                        Some((e.name.clone(), bits))
                    })
                    .collect();
                return store.store(self.block_size, &maps);
            }
        };
        let mut bitmaps = Vec::with_capacity(words * 8);
        for (k, entry) in names.slots.iter().enumerate() {
            let Some(entry) = entry else { continue };
            if entry.invalid.is_none() {
                bitmaps.extend((0..words).flat_map(|w| self.bits.word(k, w).to_le_bytes()));
            } else {
                bitmaps.resize(bitmaps.len() + words * 8, 0);
            }
        }
        file.write_all_at(&bitmaps, HEADER)?;
        file.set_len(HEADER + bitmaps.len() as u64)?;
        file.sync_data()?;
        let clean = self.header(names, CLEAN, checksum(&bitmaps), mtime(image)?);
        file.write_all_at(&clean.encode(), 0)?;
        file.sync_data()
    }
}

#[cfg(test)]
#[path = "map_tests.rs"]
mod tests;
