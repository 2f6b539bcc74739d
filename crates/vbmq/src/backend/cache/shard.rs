//! One shard of the block cache: its index and its S3-FIFO eviction queues. A shard owns a fixed
//! set of slots in the cache's arena; it never holds more blocks than it has slots.
//!
//! S3-FIFO (Yang et al., SOSP 2023) is scan resistant: a block enters a small FIFO and moves to
//! the main FIFO only if it is hit again before it leaves, so a one-pass scan flushes the small
//! queue and leaves the main one alone. Blocks evicted from the small queue are remembered in a
//! ghost FIFO (numbers only); a miss on one of them goes straight to the main queue.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};

/// Hit counts saturate here; the main queue gives a block this many second chances.
const MAX_FREQ: u8 = 3;

/// Mixes a block number (murmur3's finaliser): sequential blocks spread over shards and buckets.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// Hashes block numbers for the shard's map, independently of the bits that chose the shard.
#[derive(Clone, Copy, Default)]
pub struct BlockHash;

/// See [`BlockHash`].
#[derive(Default)]
pub struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = mix(self.0 ^ u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = mix(n ^ 0x9e37_79b9_7f4a_7c15);
    }
}

impl BuildHasher for BlockHash {
    type Hasher = BlockHasher;

    fn build_hasher(&self) -> BlockHasher {
        BlockHasher(0)
    }
}

/// A cached block's entry in the index: everything a hit touches, in the map's own bucket.
#[derive(Clone, Copy, Debug)]
struct Entry {
    slot: u32,
    freq: u8,
    /// Brought in by read-ahead and not read since.
    prefetched: bool,
}

/// What eviction needs to know of a slot.
#[derive(Clone, Copy, Debug, Default)]
struct SlotMeta {
    block: u64,
    /// Holds a block (false: free, or invalidated while waiting in a queue).
    live: bool,
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The slot, local to the shard.
    pub slot: u32,
    /// The block had been brought in by read-ahead; this is its first hit.
    pub prefetched: bool,
}

/// The index and queues of one shard; the slots' bytes are in the cache's arena.
pub struct Shard {
    map: HashMap<u64, Entry, BlockHash>,
    meta: Vec<SlotMeta>,
    /// Slots never used yet.
    free: Vec<u32>,
    small: VecDeque<u32>,
    main: VecDeque<u32>,
    /// Recently evicted from `small`, with a stamp to tell stale queue entries apart.
    ghost: HashMap<u64, u32, BlockHash>,
    ghost_fifo: VecDeque<(u64, u32)>,
    ghost_stamp: u32,
    small_target: usize,
    /// Bumped by every invalidation: a fill that started under an older generation may carry
    /// data a completed write has replaced, and is dropped.
    pub generation: u64,
}

/// Bytes of index and queues per slot, at most: the cache's size budget reserves this much.
pub const META_BYTES_PER_SLOT: usize = 128;

impl Shard {
    pub fn new(slots: u32) -> Self {
        let n = slots as usize;
        Shard {
            map: HashMap::with_capacity_and_hasher(n, BlockHash),
            meta: vec![SlotMeta::default(); n],
            free: (0..slots).rev().collect(),
            small: VecDeque::with_capacity(n),
            main: VecDeque::with_capacity(n),
            ghost: HashMap::with_capacity_and_hasher(n, BlockHash),
            ghost_fifo: VecDeque::with_capacity(n + 1),
            ghost_stamp: 0,
            small_target: (n / 10).max(1),
            generation: 0,
        }
    }

    /// Finds `block` and counts the hit.
    pub fn lookup(&mut self, block: u64) -> Option<Hit> {
        let entry = self.map.get_mut(&block)?;
        // A read-ahead block's first read is its first use, not a sign that it is hot: a
        // sequential scan must not promote itself into the main queue.
        let prefetched = std::mem::take(&mut entry.prefetched);
        if !prefetched {
            entry.freq = (entry.freq + 1).min(MAX_FREQ);
        }
        Some(Hit {
            slot: entry.slot,
            prefetched,
        })
    }

    pub fn contains(&self, block: u64) -> bool {
        self.map.contains_key(&block)
    }

    /// Whether a block can be inserted without evicting one.
    pub fn has_free_slot(&self) -> bool {
        !self.free.is_empty()
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Takes a slot for `block` (not present), evicting if the shard is full. Returns the slot
    /// and whether a live block was evicted. The caller then fills the slot's bytes.
    pub fn insert(&mut self, block: u64, prefetched: bool) -> Option<(u32, bool)> {
        let (slot, evicted) = match self.free.pop() {
            Some(slot) => (slot, false),
            None => self.evict()?,
        };
        self.meta[slot as usize] = SlotMeta { block, live: true };
        self.map.insert(
            block,
            Entry {
                slot,
                freq: 0,
                prefetched,
            },
        );
        if self.ghost.remove(&block).is_some() {
            self.main.push_back(slot);
        } else {
            self.small.push_back(slot);
        }
        Some((slot, evicted))
    }

    /// Drops `block` if present; its slot is reclaimed when it reaches the head of its queue.
    pub fn invalidate(&mut self, block: u64) {
        if let Some(entry) = self.map.remove(&block) {
            self.meta[entry.slot as usize].live = false;
        }
    }

    /// Drops every block in `[first, end)`, scanning the shard instead of the range.
    pub fn invalidate_range(&mut self, first: u64, end: u64) {
        let meta = &mut self.meta;
        self.map.retain(|block, entry| {
            let keep = !(first..end).contains(block);
            if !keep {
                meta[entry.slot as usize].live = false;
            }
            keep
        });
    }

    /// Frees one slot: S3-FIFO's eviction. Returns it and whether it held a live block.
    fn evict(&mut self) -> Option<(u32, bool)> {
        // Each step either frees a slot, moves a block from small to main, or spends one of a
        // main block's chances, so this ends within a few passes over the shard.
        loop {
            let from_small = self.small.len() >= self.small_target || self.main.is_empty();
            let slot = if from_small {
                self.small.pop_front()?
            } else {
                self.main.pop_front()?
            };
            let meta = self.meta[slot as usize];
            // A live slot's block is in the map: the two change together.
            let entry = match self.map.get_mut(&meta.block) {
                Some(entry) if meta.live => entry,
                _ => return Some((slot, false)),
            };
            if from_small {
                if entry.freq > 0 {
                    entry.freq = 0;
                    self.main.push_back(slot);
                    continue;
                }
            } else if entry.freq > 0 {
                entry.freq -= 1;
                self.main.push_back(slot);
                continue;
            }
            let prefetched = entry.prefetched;
            self.meta[slot as usize].live = false;
            self.map.remove(&meta.block);
            // A read-ahead block never read says nothing about the future: no ghost for it.
            if from_small && !prefetched {
                self.remember(meta.block);
            }
            return Some((slot, true));
        }
    }

    fn remember(&mut self, block: u64) {
        self.ghost_stamp = self.ghost_stamp.wrapping_add(1);
        self.ghost.insert(block, self.ghost_stamp);
        self.ghost_fifo.push_back((block, self.ghost_stamp));
        while self.ghost_fifo.len() > self.meta.len() {
            if let Some((old, stamp)) = self.ghost_fifo.pop_front()
                && self.ghost.get(&old) == Some(&stamp)
            {
                self.ghost.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_blocks_than_slots() {
        let mut shard = Shard::new(16);
        for block in 0..1000 {
            if !shard.contains(block) {
                shard.insert(block, false).unwrap();
            }
            assert!(shard.len() <= 16);
        }
        assert_eq!(shard.len(), 16);
    }

    #[test]
    fn a_scan_does_not_evict_the_hot_set() {
        let mut shard = Shard::new(100);
        let hot: Vec<u64> = (0..40).collect();
        for _ in 0..3 {
            for &block in &hot {
                if shard.lookup(block).is_none() {
                    shard.insert(block, false).unwrap();
                }
            }
        }
        for block in 1000..5000 {
            if shard.lookup(block).is_none() {
                shard.insert(block, false).unwrap();
            }
        }
        let kept = hot.iter().filter(|b| shard.contains(**b)).count();
        assert_eq!(kept, hot.len(), "the scan evicted hot blocks");
    }

    #[test]
    fn invalidated_blocks_are_gone_and_their_slots_reused() {
        let mut shard = Shard::new(4);
        for block in 0..4 {
            shard.insert(block, false).unwrap();
        }
        shard.invalidate(2);
        shard.invalidate_range(0, 2);
        assert!(!shard.contains(0) && !shard.contains(1) && !shard.contains(2));
        assert!(shard.contains(3));
        for block in 10..13 {
            let (_, evicted) = shard.insert(block, false).unwrap();
            assert!(
                !evicted,
                "a dead slot should be reused before a live block is evicted"
            );
        }
        assert_eq!(shard.len(), 4);
    }

    #[test]
    fn a_prefetched_block_reports_its_first_hit_only() {
        let mut shard = Shard::new(4);
        shard.insert(7, true).unwrap();
        assert!(shard.lookup(7).unwrap().prefetched);
        assert!(!shard.lookup(7).unwrap().prefetched);
    }
}
