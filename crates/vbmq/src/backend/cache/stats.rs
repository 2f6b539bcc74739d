//! Cache statistics, per disk. Each queue's engine counts into its own cache line (one writer,
//! no locked instruction); a report sums them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// One disk's cache figures at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served entirely from the cache.
    pub hits: u64,
    /// Reads that needed the file for at least one block.
    pub misses: u64,
    /// Bytes of reads served from the cache.
    pub hit_bytes: u64,
    /// Bytes of reads served from the file.
    pub miss_bytes: u64,
    /// Blocks pushed out of the cache to make room.
    pub evictions: u64,
    /// Cached blocks read for the first time after read-ahead brought them in.
    pub readahead_hits: u64,
    /// Bytes read ahead.
    pub readahead_bytes: u64,
    /// Blocks read from the file but not cached because a write completed meanwhile.
    pub fills_dropped: u64,
}

impl CacheStats {
    /// Fraction of read bytes served from the cache.
    pub fn hit_ratio(&self) -> f64 {
        let total = self.hit_bytes + self.miss_bytes;
        if total == 0 {
            0.0
        } else {
            self.hit_bytes as f64 / total as f64
        }
    }

    fn add(&mut self, other: &CacheStats) {
        self.hits += other.hits;
        self.misses += other.misses;
        self.hit_bytes += other.hit_bytes;
        self.miss_bytes += other.miss_bytes;
        self.evictions += other.evictions;
        self.readahead_hits += other.readahead_hits;
        self.readahead_bytes += other.readahead_bytes;
        self.fills_dropped += other.fills_dropped;
    }
}

impl fmt::Display for CacheStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hits={} misses={} hit_bytes={} miss_bytes={} hit_ratio={:.3} evictions={} \
             readahead_hits={} readahead_bytes={} fills_dropped={}",
            self.hits,
            self.misses,
            self.hit_bytes,
            self.miss_bytes,
            self.hit_ratio(),
            self.evictions,
            self.readahead_hits,
            self.readahead_bytes,
            self.fills_dropped
        )
    }
}

/// One queue's counters, written only by its engine.
#[repr(align(128))]
#[derive(Default)]
pub struct QueueCounters {
    hits: AtomicU64,
    misses: AtomicU64,
    hit_bytes: AtomicU64,
    miss_bytes: AtomicU64,
    evictions: AtomicU64,
    readahead_hits: AtomicU64,
    readahead_bytes: AtomicU64,
    fills_dropped: AtomicU64,
}

/// Adds to a counter that only the calling thread writes.
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

impl QueueCounters {
    pub fn hit(&self, bytes: u64) {
        bump(&self.hits, 1);
        bump(&self.hit_bytes, bytes);
    }

    pub fn miss(&self, hit_bytes: u64, miss_bytes: u64) {
        bump(&self.misses, 1);
        bump(&self.hit_bytes, hit_bytes);
        bump(&self.miss_bytes, miss_bytes);
    }

    pub fn evicted(&self, blocks: u64) {
        bump(&self.evictions, blocks);
    }

    pub fn readahead_hit(&self) {
        bump(&self.readahead_hits, 1);
    }

    pub fn read_ahead(&self, bytes: u64) {
        bump(&self.readahead_bytes, bytes);
    }

    pub fn dropped(&self, blocks: u64) {
        bump(&self.fills_dropped, blocks);
    }

    fn snapshot(&self) -> CacheStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            hit_bytes: get(&self.hit_bytes),
            miss_bytes: get(&self.miss_bytes),
            evictions: get(&self.evictions),
            readahead_hits: get(&self.readahead_hits),
            readahead_bytes: get(&self.readahead_bytes),
            fills_dropped: get(&self.fills_dropped),
        }
    }
}

/// The counters of one disk's queues, live and retired.
pub struct DiskStats {
    /// Names the disk in reports.
    pub label: String,
    queues: Mutex<(Vec<Arc<QueueCounters>>, CacheStats)>,
}

/// Every cached disk's statistics, for reports: the control plane only.
static REGISTRY: Mutex<Vec<Weak<DiskStats>>> = Mutex::new(Vec::new());

impl DiskStats {
    /// Statistics for a new disk, listed in [`report`] while it lives.
    pub fn register(label: &str) -> Arc<Self> {
        let stats = Arc::new(DiskStats {
            label: label.to_string(),
            queues: Mutex::new((Vec::new(), CacheStats::default())),
        });
        let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
        registry.retain(|weak| weak.strong_count() > 0);
        registry.push(Arc::downgrade(&stats));
        stats
    }

    /// Counters for a new engine of this disk.
    pub fn queue(&self) -> Arc<QueueCounters> {
        let counters = Arc::new(QueueCounters::default());
        self.lock().0.push(counters.clone());
        counters
    }

    /// Folds an engine's counters into the disk's total when the engine goes away.
    pub fn retire(&self, counters: &Arc<QueueCounters>) {
        let mut guard = self.lock();
        let (live, retired) = &mut *guard;
        if let Some(i) = live.iter().position(|c| Arc::ptr_eq(c, counters)) {
            retired.add(&live.swap_remove(i).snapshot());
        }
    }

    /// The disk's totals so far.
    pub fn snapshot(&self) -> CacheStats {
        let guard = self.lock();
        let mut total = guard.1;
        for counters in &guard.0 {
            total.add(&counters.snapshot());
        }
        total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<Arc<QueueCounters>>, CacheStats)> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The statistics of every cached disk alive, by label.
pub fn report() -> Vec<(String, CacheStats)> {
    let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    registry
        .iter()
        .filter_map(Weak::upgrade)
        .map(|stats| (stats.label.clone(), stats.snapshot()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_live_and_retired_queues() {
        let disk = DiskStats::register("t");
        let a = disk.queue();
        let b = disk.queue();
        a.hit(4096);
        b.miss(0, 8192);
        disk.retire(&a);
        a.hit(4096); // After retirement: not counted again.
        let total = disk.snapshot();
        assert_eq!((total.hits, total.misses), (1, 1));
        assert_eq!((total.hit_bytes, total.miss_bytes), (4096, 8192));
        assert!(report().iter().any(|(label, _)| label == "t"));
    }
}
