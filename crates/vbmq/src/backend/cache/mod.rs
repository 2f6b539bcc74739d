//! `cache=SIZE`: vbmq's own DRAM read cache in front of a file or RBD disk.
//!
//! A hit is one copy from the cache into the guest's buffer on the queue's thread: no system
//! call, no wake-up (studies of VM-side against hypervisor-side caches measure a hypervisor-side hit at 3% of a guest page-cache
//! hit because every hit still travelled the virtual I/O path). Disks opened on the same file (or
//! RBD image) in one process share one cache, so VMs booted from one base image hit the same
//! blocks.
//!
//! The cache sees only what goes through vbmq: an image changed behind its back by another
//! process (or another RBD client) is not noticed. vbmq locks its images against that (an OFD
//! lock on files, the exclusive lock on RBD images). The cache lives in the process: after a
//! restart it starts empty, so nothing stale survives one.

mod engine;
mod readahead;
mod shard;
mod stats;
mod store;

use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tracing::{info, warn};

use self::engine::{CacheStage, MAX_PREFETCH};
pub use self::stats::{CacheStats, DiskStats, report};
use self::store::BlockCache;
use super::layer::{Layer, Layered, StagedEngine};
use super::{Disk, Engine, EngineOptions};
use crate::host_size;

/// The cache block: the unit of lookup, fill and eviction.
const BLOCK_SIZE: usize = 4096;

/// What a cache holds blocks of: disks on the same image share its cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageId {
    /// A file: (device, inode), or (`u64::MAX`, device number) for a block device.
    File(u64, u64),
    /// An RBD image: its cluster configuration file, pool, namespace and name.
    Rbd(String),
}

impl ImageId {
    /// The identity of the file or block device at `path`.
    pub fn of_file(path: &Path) -> io::Result<Self> {
        let metadata = std::fs::metadata(path)?;
        // A block device is the same disk under any device node that names it.
        Ok(if metadata.file_type().is_block_device() {
            ImageId::File(u64::MAX, metadata.rdev())
        } else {
            ImageId::File(metadata.dev(), metadata.ino())
        })
    }
}

/// The caches alive, by their image. Few entries, looked up when a disk is opened.
static CACHES: Mutex<Vec<(ImageId, Weak<BlockCache>)>> = Mutex::new(Vec::new());

/// How much a cache holds, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// The `cache=` size.
    pub budget: u64,
    /// Bytes per cached block.
    pub block_size: usize,
    /// Blocks it can hold.
    pub slots: usize,
    /// Blocks it holds now.
    pub resident: usize,
}

/// A disk with a DRAM read cache in front.
pub type CachedDisk = Layered<Cache>;

/// The layer that keeps a DRAM read cache of the disk below.
pub struct Cache {
    cache: Arc<BlockCache>,
    stats: Arc<DiskStats>,
    /// The capacity the engines check reads against, changed by `resize`.
    capacity: Arc<AtomicU64>,
}

/// The cache of image `key` (named `name` in the log), shared with every other disk open on it.
fn shared_cache(
    key: ImageId,
    name: &str,
    size: u64,
    block_size: usize,
) -> io::Result<Arc<BlockCache>> {
    let mut caches = CACHES.lock().unwrap_or_else(|p| p.into_inner());
    caches.retain(|(_, cache)| cache.strong_count() > 0);
    let existing = caches.iter().find(|(id, _)| *id == key);
    if let Some(cache) = existing.and_then(|(_, cache)| cache.upgrade()) {
        if cache.budget() != size || cache.block_size() != block_size {
            warn!(
                "{name}: already cached with {} bytes; cache={size} ignored",
                cache.budget()
            );
        }
        return Ok(cache);
    }
    let cache = Arc::new(BlockCache::new(size, block_size)?);
    info!("{name}: {size} byte cache of {} blocks", cache.slots());
    caches.push((key, Arc::downgrade(&cache)));
    Ok(cache)
}

impl Layered<Cache> {
    /// Puts a cache of `size` bytes in front of `inner`, the disk of the file at `path`.
    /// `label` names the disk in statistics.
    pub fn open(inner: Arc<dyn Disk>, path: &Path, size: u64, label: &str) -> io::Result<Self> {
        let image = ImageId::of_file(path)?;
        Self::open_image(inner, image, &path.display().to_string(), size, label)
    }

    /// Puts a cache of `size` bytes in front of `inner`, the disk of image `image` (called
    /// `name` in the log). `label` names the disk in statistics.
    pub fn open_image(
        inner: Arc<dyn Disk>,
        image: ImageId,
        name: &str,
        size: u64,
        label: &str,
    ) -> io::Result<Self> {
        let block_size = BLOCK_SIZE.max(inner.geometry().block_size as usize);
        let cache = Cache {
            cache: shared_cache(image, name, size, block_size)?,
            stats: DiskStats::register(label),
            capacity: Arc::new(AtomicU64::new(inner.geometry().capacity)),
        };
        Ok(Layered::new(inner, cache))
    }

    /// Reads the file from its start into the cache until the cache is full, so that the
    /// first reads hit (a base image that many VMs boot from, say). Returns the bytes read.
    pub fn preload(&self, path: &Path) -> io::Result<u64> {
        const CHUNK: usize = 1 << 20;
        let file = std::fs::File::open(path)?;
        let cache = &self.layer().cache;
        let bs = cache.block_size();
        let end = self.below().geometry().capacity;
        let mut buf = vec![0u8; CHUNK];
        let mut offset = 0u64;
        while offset < end && cache.resident() < cache.slots() {
            let len = host_size((end - offset).min(CHUNK as u64));
            let blocks = len.div_ceil(bs);
            buf[..blocks * bs].fill(0);
            file.read_exact_at(&mut buf[..len], offset)?;
            let first = offset / bs as u64;
            let generations: Vec<u64> = (first..first + blocks as u64)
                .map(|b| cache.generation(b))
                .collect();
            // SAFETY: `buf` holds `CHUNK >= blocks * bs` bytes.
            unsafe { cache.fill(first, blocks, buf.as_ptr(), &generations, false, false) };
            offset += len as u64;
        }
        Ok(offset)
    }

    /// This disk's statistics so far.
    pub fn stats(&self) -> CacheStats {
        self.layer().stats.snapshot()
    }

    /// The cache's size and occupancy.
    pub fn footprint(&self) -> Footprint {
        let cache = &self.layer().cache;
        Footprint {
            budget: cache.budget(),
            block_size: cache.block_size(),
            slots: cache.slots(),
            resident: cache.resident(),
        }
    }

    /// Whether both disks use the same cache.
    pub fn shares_cache_with(&self, other: &CachedDisk) -> bool {
        Arc::ptr_eq(&self.layer().cache, &other.layer().cache)
    }
}

impl Layer for Cache {
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        let inner = below.engine(EngineOptions {
            depth: options.depth + MAX_PREFETCH,
            ..options
        })?;
        let stage = CacheStage::new(
            self.cache.clone(),
            self.stats.clone(),
            self.capacity.clone(),
        );
        Ok(Box::new(StagedEngine::new(stage, inner)))
    }

    fn on_resize(&self, below: &dyn Disk, listener: Box<dyn Fn(u64) + Send + Sync>) {
        let (capacity, cache) = (self.capacity.clone(), self.cache.clone());
        below.on_resize(Box::new(move |bytes| {
            let before = capacity.swap(bytes, Ordering::AcqRel);
            // What lay past a new, smaller end must not come back if the image grows again.
            if bytes < before {
                cache.invalidate(bytes, before - bytes);
            }
            listener(bytes);
        }));
    }

    fn resize(&self, below: &dyn Disk, bytes: u64, _shrink: bool) -> io::Result<u64> {
        // Blocks cached past a new, smaller end would come back if the disk grew again.
        if bytes < self.capacity.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a disk with cache= only grows",
            ));
        }
        let bytes = below.resize(bytes, false)?;
        self.capacity.store(bytes, Ordering::Relaxed);
        Ok(bytes)
    }

    /// The cache's counters only.
    fn stats(&self, _below: &dyn Disk) -> Vec<(&'static str, u64)> {
        let s = self.stats.snapshot();
        vec![
            ("cache_hits", s.hits),
            ("cache_misses", s.misses),
            ("cache_hit_bytes", s.hit_bytes),
            ("cache_miss_bytes", s.miss_bytes),
            ("cache_evictions", s.evictions),
            ("cache_readahead_hits", s.readahead_hits),
            ("cache_readahead_bytes", s.readahead_bytes),
            ("cache_fills_dropped", s.fills_dropped),
        ]
    }
}
