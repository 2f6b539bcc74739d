//! Which blocks a thin disk holds: an in-memory bitmap, and its copy in the sidecar map file.
//!
//! The map file (`DISK.map`) is a 4096-byte header (magic, version, block size, the base's
//! capacity, and the disk's once grown past the base) then one bit per block, little-endian
//! 64-bit words (bit `i` of word `w` is block `64 * w + i`). A bit only ever goes from 0 to 1,
//! so a torn write of the map can only lose bits whose write was never acknowledged.
//!
//! Ordering ([`ThinMap::commit`]): the blocks' data is written to DISK, DISK is flushed
//! (`fdatasync`), the bits are written to the map file and the map file is flushed, and only
//! then are the bits set in memory (where other queues see them) and the writes acknowledged.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::held_files::{self, Held};
use crate::host_size;
use crate::own_files::{self, Access, Create};

const MAGIC: &[u8; 8] = b"VBMQTHIN";
const VERSION: u32 = 1;
/// Bytes before the bitmap.
pub const HEADER: u64 = 4096;
/// Where the header records a disk grown past its base: its capacity (0: the base's).
const GROWN_AT: usize = 32;

/// The present and busy bits of every block, and the map file.
pub struct ThinMap {
    block_size: u64,
    capacity: u64,
    /// The disk's capacity: the base's, or more once grown (blocks past the base are DISK's).
    disk_capacity: AtomicU64,
    blocks: u64,
    /// Blocks DISK holds, as the map file records them.
    present: Vec<AtomicU64>,
    /// Blocks being copied into DISK by one engine (or the fill), which others wait for.
    busy: Vec<AtomicU64>,
    present_count: AtomicU64,
    file: File,
    /// DISK, flushed before the map.
    data: File,
    /// The bitmap as written to the map file, under the lock that orders map writes.
    written: Mutex<Vec<u64>>,
    /// The map file is in use: no snapshot is written into it.
    _held: Held,
}

/// The map file of the thin disk at `disk`.
pub fn map_path(disk: &Path) -> PathBuf {
    let mut name = disk.as_os_str().to_owned();
    name.push(".map");
    PathBuf::from(name)
}

fn missing_map(map_path: &Path) -> io::Error {
    invalid(format!(
        "holds data but {} is missing: not a disk made from a base, or its map is lost",
        map_path.display()
    ))
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

fn header(block_size: u64, capacity: u64) -> Vec<u8> {
    let mut header = vec![0u8; host_size(HEADER)];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&block_size.to_le_bytes());
    header[24..32].copy_from_slice(&capacity.to_le_bytes());
    header
}

fn field(header: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&header[at..at + 8]);
    u64::from_le_bytes(bytes)
}

impl ThinMap {
    /// Opens the map of `data` (the DISK file at `path`) over a base of `capacity` bytes, or
    /// makes it if DISK is empty (then sized to the base). `block_size`: the block asked for,
    /// `None` to take the map's (64 KiB for a new one).
    pub fn open(
        path: &Path,
        data: File,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<Self> {
        let map_path = map_path(path);
        let opened = own_files::open(&map_path, Access::read_write(Create::No));
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if data.metadata()?.len() != 0 {
                    return Err(missing_map(&map_path));
                }
                Self::create(&map_path, block_size.unwrap_or(64 << 10), capacity)?
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("{}: {e}", map_path.display()),
                ));
            }
        };
        Self::from_file(file, &map_path, data, capacity, block_size)
    }

    /// As [`ThinMap::open`], from the map file a client opened (read-write) and passed, named
    /// `map_path` in messages. A map never written (empty, or a header of zeros: `vbmq ctl
    /// add-disk` creates it empty, a crash may leave it sized but blank) of a DISK still empty
    /// is written here, in place; one of a DISK that holds data is refused.
    pub fn open_passed(
        file: File,
        map_path: &Path,
        data: File,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<Self> {
        let mut magic = [0u8; 8];
        let blank = file.metadata()?.len() < HEADER
            || (file.read_exact_at(&mut magic, 0).is_ok() && magic == [0u8; 8]);
        if blank {
            if data.metadata()?.len() != 0 {
                return Err(missing_map(map_path));
            }
            let block_size = block_size.unwrap_or(64 << 10);
            // Sized first: a crash before the header is written leaves a blank map again.
            file.set_len(HEADER + capacity.div_ceil(block_size).div_ceil(64) * 8)?;
            file.write_all_at(&header(block_size, capacity), 0)?;
            file.sync_all()?;
        }
        Self::from_file(file, map_path, data, capacity, block_size)
    }

    fn from_file(
        file: File,
        map_path: &Path,
        data: File,
        capacity: u64,
        block_size: Option<u64>,
    ) -> io::Result<Self> {
        let mut head = vec![0u8; host_size(HEADER)];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| invalid(format!("{}: header: {e}", map_path.display())))?;
        if &head[..8] != MAGIC || head[8..12] != VERSION.to_le_bytes() {
            return Err(invalid(format!(
                "{} is not a vbmq thin-disk map (version {VERSION})",
                map_path.display()
            )));
        }
        let (bs, recorded) = (field(&head, 16), field(&head, 24));
        if !bs.is_power_of_two() || !(4096..=(16 << 20)).contains(&bs) {
            return Err(invalid(format!(
                "{}: bad block size {bs}",
                map_path.display()
            )));
        }
        if block_size.is_some_and(|asked| asked != bs) {
            return Err(invalid(format!(
                "{} records base-block={bs}: it cannot change",
                map_path.display()
            )));
        }
        if recorded != capacity {
            return Err(invalid(format!(
                "the map records a base of {recorded} bytes, the base has {capacity}: not the base this disk was made from"
            )));
        }
        let blocks = capacity.div_ceil(bs);
        let words =
            usize::try_from(blocks.div_ceil(64)).map_err(|_| invalid("too large".into()))?;
        let mut raw = vec![0u8; words * 8];
        file.read_exact_at(&mut raw, HEADER)
            .map_err(|e| invalid(format!("{}: bitmap: {e}", map_path.display())))?;
        let written: Vec<u64> = raw.chunks_exact(8).map(|w| field(w, 0)).collect();
        let present_count = written.iter().map(|w| u64::from(w.count_ones())).sum();
        // A crash between making the map and sizing DISK leaves DISK empty; a DISK emptied or
        // replaced since would read zeros where the map says it holds blocks.
        // Grown past the base: the capacity recorded (0 in maps of disks never grown).
        let grown = field(&head, GROWN_AT);
        let disk_capacity = grown.max(capacity);
        let len = data.metadata()?.len();
        if len < capacity && present_count > 0 {
            return Err(invalid(format!(
                "DISK has {len} bytes but {} records {present_count} blocks copied into it: \
                 DISK was replaced or truncated",
                map_path.display()
            )));
        }
        // A crash in a resize, after the map recorded the new size, leaves DISK shorter.
        if len < disk_capacity {
            data.set_len(disk_capacity)?;
        } else if len > disk_capacity {
            return Err(invalid(format!(
                "DISK has {len} bytes, more than the disk's {disk_capacity}"
            )));
        }
        Ok(ThinMap {
            block_size: bs,
            capacity,
            disk_capacity: AtomicU64::new(disk_capacity),
            blocks,
            present: written.iter().map(|w| AtomicU64::new(*w)).collect(),
            busy: (0..words).map(|_| AtomicU64::new(0)).collect(),
            present_count: AtomicU64::new(present_count),
            _held: held_files::hold(&file)?,
            file,
            data,
            written: Mutex::new(written),
        })
    }

    /// Writes a new, empty map under a temporary name, flushes it and renames it in place. The
    /// temporary is made anew (`O_EXCL`): whatever a crash or someone else left under its
    /// name, a symbolic link included, is removed first, never followed.
    fn create(map_path: &Path, block_size: u64, capacity: u64) -> io::Result<File> {
        let blocks = capacity.div_ceil(block_size);
        let tmp = map_path.with_extension("map.new");
        let in_context = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", tmp.display()));
        own_files::remove_stale(&tmp).map_err(in_context)?;
        let file =
            own_files::open(&tmp, Access::read_write(Create::New(0o600))).map_err(in_context)?;
        file.write_all_at(&header(block_size, capacity), 0)?;
        file.set_len(HEADER + blocks.div_ceil(64) * 8)?;
        file.sync_all()?;
        std::fs::rename(&tmp, map_path)?;
        if let Some(dir) = map_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(file)
    }

    /// The disk's capacity in bytes (the base's, or more once grown).
    pub fn disk_capacity(&self) -> u64 {
        self.disk_capacity.load(Ordering::Relaxed)
    }

    /// Grows the disk to `bytes`, past the base: the new size is recorded in the map (flushed)
    /// before DISK grows, so a crash in between only leaves DISK to grow at the next open. The
    /// base must end on a block boundary (no block is part base, part not), and a disk made
    /// from a base never shrinks.
    pub fn grow(&self, bytes: u64) -> io::Result<u64> {
        let refuse = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        let current = self.disk_capacity();
        if bytes < current {
            return refuse(format!(
                "a disk made from a base does not shrink (it has {current} bytes)"
            ));
        }
        if bytes == current {
            return Ok(current);
        }
        if !self.capacity.is_multiple_of(self.block_size) {
            return refuse(format!(
                "the base's {} bytes are not whole {}-byte blocks: it cannot grow past the base",
                self.capacity, self.block_size
            ));
        }
        let _order = self.written.lock().unwrap_or_else(|p| p.into_inner());
        self.file
            .write_all_at(&bytes.to_le_bytes(), GROWN_AT as u64)?;
        self.file.sync_data()?;
        self.data.set_len(bytes)?;
        self.data.sync_all()?;
        self.disk_capacity.store(bytes, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Number of blocks (the last may be short).
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Blocks DISK holds.
    pub fn present_count(&self) -> u64 {
        self.present_count.load(Ordering::Relaxed)
    }

    /// Bytes of block `block` (the last one may be short), past the base too: a grown disk's
    /// blocks end at its capacity, not the base's (0 past the end).
    pub fn block_len(&self, block: u64) -> u64 {
        let start = block.saturating_mul(self.block_size);
        self.disk_capacity()
            .saturating_sub(start)
            .min(self.block_size)
    }

    fn bit(block: u64) -> (usize, u64) {
        ((block / 64) as usize, 1 << (block % 64))
    }

    /// Whether DISK holds `block` (its map bit is durable, or it lies past the base).
    pub fn is_present(&self, block: u64) -> bool {
        if block >= self.blocks {
            return true;
        }
        let (word, bit) = Self::bit(block);
        self.present
            .get(word)
            .is_some_and(|w| w.load(Ordering::Acquire) & bit != 0)
    }

    /// Claims `block` for copying; false if someone else has it.
    pub fn try_claim(&self, block: u64) -> bool {
        let (word, bit) = Self::bit(block);
        self.busy
            .get(word)
            .is_some_and(|w| w.fetch_or(bit, Ordering::AcqRel) & bit == 0)
    }

    /// Gives a claimed block back.
    pub fn release(&self, block: u64) {
        let (word, bit) = Self::bit(block);
        if let Some(w) = self.busy.get(word) {
            w.fetch_and(!bit, Ordering::AcqRel);
        }
    }

    /// Records `blocks` (claimed, their data written to DISK) as present: flushes DISK, writes
    /// and flushes their map bits, then marks them present in memory. One call per pass.
    pub fn commit(&self, blocks: &[u64]) -> io::Result<()> {
        if blocks.is_empty() {
            return Ok(());
        }
        self.data.sync_data()?;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let (mut low, mut high) = (usize::MAX, 0);
        for &block in blocks {
            let (word, bit) = Self::bit(block);
            let Some(w) = written.get_mut(word) else {
                return Err(invalid(format!("block {block} past the end")));
            };
            *w |= bit;
            low = low.min(word);
            high = high.max(word);
        }
        let bytes: Vec<u8> = written[low..=high]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        self.file.write_all_at(&bytes, HEADER + low as u64 * 8)?;
        self.file.sync_data()?;
        for &block in blocks {
            let (word, bit) = Self::bit(block);
            if self.present[word].fetch_or(bit, Ordering::AcqRel) & bit == 0 {
                self.present_count.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs::OpenOptions;

    use super::*;

    const BASE: u64 = 1 << 20;

    fn files(dir: &Path) -> (PathBuf, File) {
        let disk = dir.join("d.raw");
        let data = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&disk)
            .unwrap();
        (disk, data)
    }

    #[test]
    fn a_grown_disk_keeps_its_size_and_a_crash_in_the_resize_grows_it_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, data) = files(dir.path());
        let map = ThinMap::open(&disk, data.try_clone().unwrap(), BASE, None).unwrap();
        assert!(map.is_present(map.blocks()), "past the base is DISK's");
        let e = map.grow(BASE - 4096).unwrap_err().to_string();
        assert!(e.contains("does not shrink"), "{e}");
        assert_eq!(map.grow(3 * BASE).unwrap(), 3 * BASE);
        drop(map);
        assert_eq!(data.metadata().unwrap().len(), 3 * BASE);
        // A crash after the map recorded the size, before DISK grew.
        data.set_len(BASE).unwrap();
        let map = ThinMap::open(&disk, data.try_clone().unwrap(), BASE, None).unwrap();
        assert_eq!(map.disk_capacity(), 3 * BASE);
        assert_eq!(data.metadata().unwrap().len(), 3 * BASE);
    }

    #[test]
    fn a_base_of_part_of_a_block_does_not_grow_and_a_passed_blank_map_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, data) = files(dir.path());
        let map_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(map_path(&disk))
            .unwrap();
        let base = BASE + 4096;
        let map = ThinMap::open_passed(map_file, &map_path(&disk), data, base, None).unwrap();
        assert_eq!(map.disk_capacity(), base);
        let e = map.grow(2 * BASE).unwrap_err().to_string();
        assert!(e.contains("not whole"), "{e}");
        drop(map);
        // Opened by its path now: the header written in place is a map like any other.
        let (_, data) = files(dir.path());
        assert!(ThinMap::open(&disk, data, base, None).is_ok());
    }

    #[test]
    fn blocks_past_the_base_of_a_grown_disk_have_their_length() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, data) = files(dir.path());
        let map = ThinMap::open(&disk, data, BASE, Some(64 << 10)).unwrap();
        let base_blocks = map.blocks();
        assert_eq!(map.block_len(base_blocks - 1), 64 << 10);
        map.grow(3 * BASE + 4096).unwrap();
        assert_eq!(
            map.block_len(base_blocks),
            64 << 10,
            "the first past the base"
        );
        assert_eq!(map.block_len(base_blocks + 1), 64 << 10);
        let last = (3 * BASE + 4096) / (64 << 10);
        assert_eq!(
            map.block_len(last),
            4096,
            "the grown disk's short last block"
        );
        assert_eq!(map.block_len(last + 1), 0, "past the end");
    }

    #[test]
    fn a_link_planted_at_the_map_or_its_temporary_changes_nothing_it_leads_to() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, data) = files(dir.path());
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        // At DISK.map.new: removed, not followed; the map is made beside it.
        let tmp = map_path(&disk).with_extension("map.new");
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        ThinMap::open(&disk, data.try_clone().unwrap(), BASE, None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            std::fs::symlink_metadata(&tmp).is_err(),
            "the stale link is gone"
        );
        // At DISK.map: refused.
        std::fs::remove_file(map_path(&disk)).unwrap();
        std::os::unix::fs::symlink(&victim, map_path(&disk)).unwrap();
        let e = ThinMap::open(&disk, data, BASE, None)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }
}
