//! The bitmaps of a tracked disk, one set per size it has had. A disk that grows gets a new set
//! (each live map's bits copied, the grown blocks set: they changed); the old set is kept until
//! the disk closes, since a write that began before the grow may still mark it, and every read
//! takes the union of all sets. So a grow needs no lock on the I/O path and loses no bit.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::file::MAX_MAPS;

/// Times a disk may grow while it is open (each keeps its old bitmaps until the disk closes).
pub const MAX_GROWS: usize = 8;

/// The bitmaps of one size of the disk.
pub struct Generation {
    /// The disk's capacity in bytes.
    pub capacity: u64,
    /// Blocks covering it.
    pub blocks: u64,
    /// 64-bit words of each bitmap.
    pub words: usize,
    /// Each slot's bitmap, made on its first use and reused after.
    bits: [OnceLock<Box<[AtomicU64]>>; MAX_MAPS],
}

impl Generation {
    /// The bitmaps of a disk of `capacity` bytes in blocks of `block_size`, none made yet.
    pub fn new(capacity: u64, block_size: u64) -> io::Result<Self> {
        let blocks = capacity.div_ceil(block_size);
        let words = usize::try_from(blocks.div_ceil(64))
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "too large"))?;
        Ok(Generation {
            capacity,
            blocks,
            words,
            bits: std::array::from_fn(|_| OnceLock::new()),
        })
    }

    /// Slot `k`'s bitmap, made on first use.
    pub fn bitmap(&self, k: usize) -> &[AtomicU64] {
        self.bits[k].get_or_init(|| (0..self.words).map(|_| AtomicU64::new(0)).collect())
    }

    /// Slot `k`'s bitmap, if it was made.
    pub fn existing(&self, k: usize) -> Option<&[AtomicU64]> {
        self.bits.get(k).and_then(OnceLock::get).map(|b| &b[..])
    }
}

/// Marks blocks `first..=last` in `bits`: a word whose bits are all set already is only read.
pub fn set_range(bits: &[AtomicU64], first: u64, last: u64) {
    let mut block = first;
    while block <= last {
        let word = block / 64;
        let high = if last / 64 == word { last % 64 } else { 63 };
        let low = block % 64;
        let mask = (u64::MAX >> (63 - (high - low))) << low;
        if let Some(w) = usize::try_from(word).ok().and_then(|i| bits.get(i))
            && w.load(Ordering::Relaxed) & mask != mask
        {
            w.fetch_or(mask, Ordering::Relaxed);
        }
        block = (word + 1) * 64;
    }
}

/// Every size the disk has had while open; the last is current.
pub struct Generations {
    first: Generation,
    grown: [OnceLock<Generation>; MAX_GROWS],
    /// 0: `first`; `i`: `grown[i - 1]`.
    current: AtomicUsize,
}

impl Generations {
    /// Starts with the bitmaps of the disk's size at open.
    pub fn new(first: Generation) -> Self {
        Generations {
            first,
            grown: std::array::from_fn(|_| OnceLock::new()),
            current: AtomicUsize::new(0),
        }
    }

    /// The bitmaps writes mark now.
    pub fn current(&self) -> &Generation {
        match self.current.load(Ordering::Acquire) {
            0 => &self.first,
            i => self
                .grown
                .get(i - 1)
                .and_then(OnceLock::get)
                .unwrap_or(&self.first),
        }
    }

    fn all(&self) -> impl Iterator<Item = &Generation> {
        std::iter::once(&self.first).chain(self.grown.iter().filter_map(OnceLock::get))
    }

    /// Word `w` of slot `k`: the union of every size's bitmap.
    pub fn word(&self, k: usize, w: usize) -> u64 {
        self.all()
            .filter_map(|g| g.existing(k).and_then(|bits| bits.get(w)))
            .fold(0, |word, bits| word | bits.load(Ordering::Acquire))
    }

    /// Empties slot `k` in every size (its current bitmap made if it was not).
    pub fn clear(&self, k: usize) {
        self.current().bitmap(k);
        for bits in self.all().filter_map(|g| g.existing(k)) {
            for word in bits {
                word.store(0, Ordering::Relaxed);
            }
        }
    }

    /// Whether the disk may grow once more.
    pub fn can_grow(&self) -> bool {
        self.current.load(Ordering::Acquire) < MAX_GROWS
    }

    /// The disk is now `capacity` bytes (more than now): the slots in `live` get bitmaps of the
    /// new size, with their bits so far and every grown block set. One caller at a time.
    pub fn grow(&self, capacity: u64, block_size: u64, live: u32) -> io::Result<()> {
        let now = self.current.load(Ordering::Acquire);
        let old = self.current();
        if capacity <= old.capacity {
            return Ok(());
        }
        let slot = self.grown.get(now).ok_or_else(|| {
            io::Error::new(io::ErrorKind::Unsupported, "grown too often while open")
        })?;
        let new = Generation::new(capacity, block_size)?;
        let first_grown = old.capacity / block_size;
        for k in (0..MAX_MAPS).filter(|k| live & (1 << k) != 0) {
            let bits = new.bitmap(k);
            for (w, word) in bits.iter().enumerate().take(old.words) {
                word.store(self.word(k, w), Ordering::Relaxed);
            }
            set_range(bits, first_grown, new.blocks - 1);
        }
        slot.set(new)
            .map_err(|_| io::Error::other("two grows at once: a defect"))?;
        self.current.store(now + 1, Ordering::Release);
        Ok(())
    }
}
