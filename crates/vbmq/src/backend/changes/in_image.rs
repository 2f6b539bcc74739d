//! Maps kept in the image itself rather than in `DISK.changes`: a qcow2 image's persistent
//! dirty bitmaps (see `backend/qcow2/bitmaps.rs`), which QEMU reads and writes too.

use std::io;

use super::file::Invalid;

/// A map the image held when the disk was opened.
pub struct ImageMap {
    /// Its name.
    pub name: String,
    /// Why it cannot be trusted, if it cannot (its bits are then empty).
    pub invalid: Option<Invalid>,
    /// One bit per block, little-endian 64-bit words (bit `i` of word `w` is block `64w + i`).
    pub bits: Vec<u64>,
}

/// The maps the image held, at one block size.
pub struct ImageMaps {
    /// Bytes per block.
    pub block_size: u64,
    /// At most `MAX_MAPS`.
    pub maps: Vec<ImageMap>,
    /// Names of bitmaps the image holds that are not maps (frozen, or past `MAX_MAPS`): no
    /// map may take them.
    pub reserved: Vec<String>,
}

/// An image that keeps a tracked disk's maps.
pub trait ImageBitmaps: Send + Sync {
    /// At open, before any write is served: the maps the image holds (at `asked` bytes per
    /// block, or the image's own, or 64 KiB) for a disk of `capacity` bytes; then every map
    /// the image holds that writes would make stale is marked in use there (flushed), so a
    /// crash leaves it invalid.
    fn load(&self, capacity: u64, asked: Option<u64>) -> io::Result<ImageMaps>;

    /// At a clean close, once no write can come: `maps` (name, and its bits if it is valid)
    /// replace the image's maps, no longer in use, flushed.
    fn store(&self, block_size: u64, maps: &[(String, Option<Vec<u64>>)]) -> io::Result<()>;
}
