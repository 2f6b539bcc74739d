//! The block cache shared by every disk open on one file: fixed-size blocks in one arena of host
//! memory, indexed by many independently locked shards. A hit locks one shard for one lookup and
//! one block copy; queue threads meet on a lock only when they touch the same shard at once.

use std::io;
use std::sync::{Mutex, MutexGuard};

use super::shard::{META_BYTES_PER_SLOT, Shard, mix};
use crate::backend::host_memory::HostMemory;
use crate::backend::iovec::IovList;
use crate::host_size;

/// Shards, at most: enough that two queue threads rarely meet on one.
const MAX_SHARDS: usize = 256;
/// Slots per shard, at least: fewer makes eviction within a shard too coarse.
const MIN_SLOTS_PER_SHARD: usize = 8;

/// A shard's lock on its own cache line, so neighbours do not share one.
#[repr(align(128))]
struct Padded(Mutex<Shard>);

/// What an insertion did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filled {
    pub inserted: u64,
    pub evicted: u64,
    /// Blocks not inserted because a write completed since the read started.
    pub dropped: u64,
}

/// The shared cache of one file.
pub struct BlockCache {
    block_size: usize,
    shards: Box<[Padded]>,
    slots_per_shard: usize,
    arena: HostMemory,
    /// The `cache=` size this cache was made for.
    budget: u64,
}

impl BlockCache {
    /// A cache using at most `budget` bytes for blocks of `block_size` bytes and their index.
    pub fn new(budget: u64, block_size: usize) -> io::Result<Self> {
        let per_slot = (block_size + META_BYTES_PER_SLOT) as u64;
        let slots = usize::try_from(budget / per_slot).unwrap_or(usize::MAX);
        if slots < MIN_SLOTS_PER_SHARD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a cache needs room for at least {MIN_SLOTS_PER_SHARD} blocks"),
            ));
        }
        let shard_count = (slots / MIN_SLOTS_PER_SHARD)
            .min(MAX_SHARDS)
            .next_power_of_two();
        // next_power_of_two may round up past what fits: halve back.
        let shard_count = if shard_count * MIN_SLOTS_PER_SHARD > slots {
            shard_count / 2
        } else {
            shard_count
        };
        let slots_per_shard = slots / shard_count;
        let shards = (0..shard_count)
            .map(|_| {
                Padded(Mutex::new(Shard::new(
                    u32::try_from(slots_per_shard).unwrap_or(u32::MAX),
                )))
            })
            .collect();
        let arena = HostMemory::new(shard_count * slots_per_shard * block_size)?;
        Ok(BlockCache {
            block_size,
            shards,
            slots_per_shard,
            arena,
            budget,
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Blocks the cache can hold.
    pub fn slots(&self) -> usize {
        self.shards.len() * self.slots_per_shard
    }

    /// Blocks held now.
    pub fn resident(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).len()).sum()
    }

    fn shard_of(&self, block: u64) -> usize {
        host_size(mix(block)) & (self.shards.len() - 1)
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A panic while holding a shard cannot leave it inconsistent for readers of bytes: the
        // index is updated before or after a copy, never half way. Keep serving.
        self.shards[shard]
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The bytes of `slot` in `shard`.
    fn slot_ptr(&self, shard: usize, slot: u32) -> *mut u8 {
        let index = shard * self.slots_per_shard + slot as usize;
        // SAFETY: `slot < slots_per_shard` (the shard hands out only its own slots), so the
        // block lies inside the arena.
        unsafe { self.arena.as_ptr().add(index * self.block_size) }
    }

    /// Copies bytes `[within, within + len)` of `block` into `iov` at `at`, if it is cached.
    /// Returns `None` on a miss, else whether the block came from read-ahead.
    pub fn read(
        &self,
        block: u64,
        within: usize,
        len: usize,
        iov: &IovList,
        at: usize,
    ) -> Option<bool> {
        let shard = self.shard_of(block);
        let mut guard = self.lock(shard);
        let hit = guard.lookup(block)?;
        let src = self.slot_ptr(shard, hit.slot);
        debug_assert!(within + len <= self.block_size);
        // SAFETY: the slot's bytes are only written under this shard's lock, which is held; the
        // range is inside the block; guest buffers never overlap vbmq's arena.
        unsafe { iov.copy_in(at, src.add(within), len.min(self.block_size - within)) };
        Some(hit.prefetched)
    }

    /// The generation of `block`'s shard: pass it to [`Self::fill`] for data read from now on.
    pub fn generation(&self, block: u64) -> u64 {
        self.lock(self.shard_of(block)).generation
    }

    /// Inserts `count` blocks from `first`, their bytes at `data`, unless the block's shard has
    /// seen an invalidation since `generations[i]` was taken, or the block is already cached.
    /// Without `evict`, only into free slots.
    ///
    /// # Safety
    ///
    /// `data` is valid for reads of `count * block_size` bytes.
    pub unsafe fn fill(
        &self,
        first: u64,
        count: usize,
        data: *const u8,
        generations: &[u64],
        prefetched: bool,
        evict: bool,
    ) -> Filled {
        let mut filled = Filled::default();
        for i in 0..count {
            let block = first + i as u64;
            let shard = self.shard_of(block);
            let mut guard = self.lock(shard);
            if generations.get(i) != Some(&guard.generation) {
                filled.dropped += 1;
                continue;
            }
            if guard.contains(block) || (!evict && !guard.has_free_slot()) {
                continue;
            }
            let Some((slot, evicted)) = guard.insert(block, prefetched) else {
                continue;
            };
            filled.inserted += 1;
            filled.evicted += u64::from(evicted);
            // SAFETY: the caller guarantees `data` has `count` blocks; the slot is written
            // under its shard's lock.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.add(i * self.block_size),
                    self.slot_ptr(shard, slot),
                    self.block_size,
                )
            };
        }
        filled
    }

    /// Whether `block` is cached.
    pub fn contains(&self, block: u64) -> bool {
        self.lock(self.shard_of(block)).contains(block)
    }

    /// Drops every cached block that overlaps bytes `[offset, offset + len)`, and makes fills
    /// that started before now drop those blocks too.
    pub fn invalidate(&self, offset: u64, len: u64) {
        let bs = self.block_size as u64;
        let first = offset / bs;
        let end = offset.saturating_add(len).div_ceil(bs);
        if end.saturating_sub(first) > self.slots() as u64 {
            for shard in 0..self.shards.len() {
                let mut guard = self.lock(shard);
                guard.invalidate_range(first, end);
                guard.generation += 1;
            }
            return;
        }
        for block in first..end {
            let mut guard = self.lock(self.shard_of(block));
            guard.invalidate(block);
            guard.generation += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(buf: &mut [u8]) -> (libc::iovec, usize) {
        (
            libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            },
            buf.len(),
        )
    }

    #[test]
    fn stays_within_its_budget() {
        let cache = BlockCache::new(1 << 20, 4096).unwrap();
        let used = cache.slots() * (4096 + META_BYTES_PER_SLOT);
        assert!(used <= 1 << 20 && used > (1 << 20) * 9 / 10, "{used}");
        let data = vec![7u8; 4096];
        for block in 0..10_000 {
            let generation = cache.generation(block);
            // SAFETY: `data` holds one block.
            unsafe { cache.fill(block, 1, data.as_ptr(), &[generation], false, true) };
        }
        assert!(cache.resident() <= cache.slots());
    }

    #[test]
    fn a_fill_older_than_an_invalidation_is_dropped() {
        let cache = BlockCache::new(1 << 20, 4096).unwrap();
        let old = vec![1u8; 4096];
        let generation = cache.generation(5);
        cache.invalidate(5 * 4096 + 512, 512);
        // SAFETY: `old` holds one block.
        let filled = unsafe { cache.fill(5, 1, old.as_ptr(), &[generation], false, true) };
        assert_eq!(filled.dropped, 1);
        assert!(!cache.contains(5));
        let generation = cache.generation(5);
        // SAFETY: as above.
        let filled = unsafe { cache.fill(5, 1, old.as_ptr(), &[generation], false, true) };
        assert_eq!(filled.inserted, 1);
        let mut back = vec![0u8; 100];
        let (iov, _) = list(&mut back);
        // SAFETY: one live iovec.
        let iov = unsafe { IovList::new(&iov, 1) };
        assert_eq!(cache.read(5, 10, 100, &iov, 0), Some(false));
        assert!(back.iter().all(|b| *b == 1));
        cache.invalidate(0, u64::MAX);
        assert!(!cache.contains(5));
    }
}
