//! A queue's engine in front of the file's own: hits are copied into the guest's buffers at
//! push time, on the queue's thread, without a system call; misses read whole blocks through the
//! file's engine into a staging buffer, which then serves the guest and fills the cache.
//!
//! Consistency: a write, discard or write-zeroes invalidates the blocks it touched when it
//! completes, before the guest hears of it, whatever its result; a read racing with it could
//! still bring the old bytes in, so every fill carries the generation of each block's shard
//! taken before its read was issued, and is dropped if an invalidation came in between.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::readahead::Readahead;
use super::stats::{DiskStats, QueueCounters};
use super::store::{BlockCache, Filled};
use crate::backend::iovec::IovList;
use crate::backend::layer::{Below, Stage, transfer_error};
use crate::backend::staging::Staging;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// Reads larger than this bypass the cache: they would flush it for little gain.
const MAX_CACHED_READ: usize = 1 << 20;
/// Read-ahead operations one queue keeps in flight, at most.
pub const MAX_PREFETCH: u32 = 2;
/// Staging buffers kept for reuse per queue: enough for a full queue of small misses.
const SPARE_BUFFERS: usize = 64;
/// Larger staging buffers (read-ahead, big reads) are freed after use.
const SPARE_BUFFER_MAX: usize = 128 << 10;

/// What an operation handed to the file's engine is for.
enum Kind {
    /// A guest read that missed: fill the cache, then complete the guest's read.
    Read {
        iov: IovList,
        /// Where in the guest's buffers the staged bytes go.
        at: usize,
        /// Staged bytes before the guest's first byte.
        skip: usize,
        copy_len: usize,
        /// The result the guest's read reports on success.
        total: i32,
    },
    /// Read-ahead: fill the cache only.
    Prefetch,
    /// A read forwarded as is (too large to cache).
    Bypass,
    /// Changes `[offset, offset + len)` on the file: invalidate it on completion.
    Change { offset: u64, len: u64 },
    /// Flush.
    Plain,
}

/// An operation in flight in the file's engine.
pub struct Pending {
    kind: Kind,
    /// The worker's tag (unused for read-ahead).
    tag: u64,
    staging: Option<Staging>,
    first_block: u64,
    blocks: usize,
    /// Bytes asked of the file.
    read_len: usize,
    generations: Vec<u64>,
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped (the
// `Engine::push` contract), and its own staging buffer; it moves between threads only with its
// queue's engine and is never shared.
unsafe impl Send for Pending {}

/// A queue's engine over a cached disk: the layer's part (see [`Stage`]).
pub struct CacheStage {
    cache: Arc<BlockCache>,
    counters: Arc<QueueCounters>,
    stats: Arc<DiskStats>,
    /// The disk's capacity, which a resize changes under the engine.
    capacity: Arc<AtomicU64>,
    readahead: Readahead,
    prefetching: u32,
    spare: Vec<Staging>,
    spare_generations: Vec<Vec<u64>>,
}

impl CacheStage {
    pub fn new(cache: Arc<BlockCache>, stats: Arc<DiskStats>, capacity: Arc<AtomicU64>) -> Self {
        CacheStage {
            readahead: Readahead::new(cache.budget()),
            cache,
            counters: stats.queue(),
            stats,
            capacity,
            prefetching: 0,
            spare: Vec::new(),
            spare_generations: Vec::new(),
        }
    }

    fn staging(&mut self, len: usize) -> io::Result<Staging> {
        if let Some(i) = self.spare.iter().position(|s| s.capacity() >= len) {
            return Ok(self.spare.swap_remove(i));
        }
        Staging::aligned(len.next_power_of_two(), self.cache.block_size())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
    }

    /// Reads blocks `[first, first + blocks)` from the file into a staging buffer.
    fn read_blocks(
        &mut self,
        below: &mut Below<Self>,
        first: u64,
        blocks: usize,
        kind: Kind,
        tag: u64,
    ) -> io::Result<()> {
        let bs = self.cache.block_size();
        let start = first * bs as u64;
        let capacity = self.capacity.load(Ordering::Relaxed);
        let read_len = host_size((start + (blocks * bs) as u64).min(capacity) - start);
        let mut generations = self.spare_generations.pop().unwrap_or_default();
        generations.clear();
        // Taken before the read is issued: see the module's comment.
        generations.extend((first..first + blocks as u64).map(|b| self.cache.generation(b)));
        let mut staging = self.staging(blocks * bs)?;
        let op = IoOp::Read {
            offset: start,
            iov: staging.list(read_len),
        };
        let pending = Pending {
            kind,
            tag,
            staging: Some(staging),
            first_block: first,
            blocks,
            read_len,
            generations,
        };
        below.forward(op, pending)
    }

    fn read(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
    ) -> io::Result<()> {
        let len = iov.len();
        let end = offset.saturating_add(len as u64);
        let Ok(total) = i32::try_from(len) else {
            below.answer(tag, -libc::EINVAL);
            return Ok(());
        };
        let capacity = self.capacity.load(Ordering::Relaxed);
        if len == 0 || end > capacity {
            below.answer(tag, if len == 0 { 0 } else { -libc::EIO });
            return Ok(());
        }
        let prefetch = self.readahead.observe(offset, len as u64, capacity);
        if len > MAX_CACHED_READ {
            self.counters.miss(0, len as u64);
            let op = IoOp::Read { offset, iov };
            return below.forward(op, pending(Kind::Bypass, tag));
        }
        let bs = self.cache.block_size() as u64;
        let (first, end_block) = (offset / bs, end.div_ceil(bs));
        let mut block = first;
        let mut copied = 0usize;
        while block < end_block {
            let block_start = block * bs;
            let from = offset.max(block_start);
            let n = host_size(end.min(block_start + bs) - from);
            let within = host_size(from - block_start);
            match self.cache.read(block, within, n, &iov, copied) {
                Some(prefetched) => {
                    if prefetched {
                        self.counters.readahead_hit();
                    }
                    copied += n;
                    block += 1;
                }
                None => break,
            }
        }
        if block == end_block {
            self.counters.hit(len as u64);
            below.answer(tag, total);
        } else {
            self.counters.miss(copied as u64, (len - copied) as u64);
            let kind = Kind::Read {
                iov,
                at: copied,
                skip: host_size(offset.saturating_sub(block * bs)),
                copy_len: len - copied,
                total,
            };
            self.read_blocks(below, block, host_size(end_block - block), kind, tag)?;
        }
        if let Some((start, len)) = prefetch {
            self.prefetch(below, start, len);
        }
        Ok(())
    }

    /// Starts reading `[start, start + len)` into the cache, skipping blocks already there.
    fn prefetch(&mut self, below: &mut Below<Self>, start: u64, len: u64) {
        if self.prefetching >= MAX_PREFETCH {
            return;
        }
        let bs = self.cache.block_size() as u64;
        let mut first = start / bs;
        let end_block = (start + len).div_ceil(bs);
        while first < end_block && self.cache.contains(first) {
            first += 1;
        }
        if first == end_block {
            return;
        }
        let blocks = host_size(end_block - first);
        match self.read_blocks(below, first, blocks, Kind::Prefetch, 0) {
            Ok(()) => {
                self.prefetching += 1;
                self.counters.read_ahead(blocks as u64 * bs);
            }
            // Read-ahead is an optimisation: a refusal only costs the misses it would have saved.
            Err(e) => crate::limited!(error, "read-ahead refused: {e}"),
        }
    }

    /// Completes one operation of the file's engine; returns the guest's completion, if any.
    fn finish(&mut self, pending: Pending, result: i32) -> Option<(u64, i32)> {
        let guest = match &pending.kind {
            Kind::Read { .. } | Kind::Prefetch => self.finish_read(&pending, result),
            Kind::Bypass | Kind::Plain => Some((pending.tag, result)),
            Kind::Change { offset, len } => {
                // Before the guest hears of it, success or not: a failed write may have changed
                // part of the range, and must not leave a cached copy that disagrees.
                self.cache.invalidate(*offset, *len);
                Some((pending.tag, result))
            }
        };
        recycle(&mut self.spare, &mut self.spare_generations, pending);
        guest
    }

    fn finish_read(&mut self, pending: &Pending, result: i32) -> Option<(u64, i32)> {
        let error = transfer_error(result, pending.read_len);
        let ok = error == 0;
        if matches!(pending.kind, Kind::Prefetch) {
            self.prefetching = self.prefetching.saturating_sub(1);
        }
        let staging = pending.staging.as_ref()?;
        if ok {
            let bs = self.cache.block_size();
            // The last block of a disk whose size is not a multiple of the block: its tail is
            // past the end, read as zeros.
            // SAFETY: the buffer holds `blocks * bs >= read_len` bytes.
            unsafe {
                std::ptr::write_bytes(
                    staging.as_ptr().add(pending.read_len),
                    0,
                    pending.blocks * bs - pending.read_len,
                )
            };
            // SAFETY: the buffer holds `blocks` blocks.
            let filled = unsafe {
                self.cache.fill(
                    pending.first_block,
                    pending.blocks,
                    staging.as_ptr(),
                    &pending.generations,
                    matches!(pending.kind, Kind::Prefetch),
                    true,
                )
            };
            self.count(filled);
        }
        let Kind::Read {
            iov,
            at,
            skip,
            copy_len,
            total,
        } = pending.kind
        else {
            return None;
        };
        if !ok {
            return Some((pending.tag, error));
        }
        // SAFETY: `skip + copy_len <= read_len` (the staged blocks cover the rest of the
        // guest's read); guest buffers never overlap the staging buffer.
        unsafe { iov.copy_in(at, staging.as_ptr().add(skip), copy_len) };
        Some((pending.tag, total))
    }

    fn count(&self, filled: Filled) {
        self.counters.evicted(filled.evicted);
        self.counters.dropped(filled.dropped);
    }
}

fn pending(kind: Kind, tag: u64) -> Pending {
    Pending {
        kind,
        tag,
        staging: None,
        first_block: 0,
        blocks: 0,
        read_len: 0,
        generations: Vec::new(),
    }
}

/// Keeps a finished operation's buffers for the next ones.
fn recycle(spare: &mut Vec<Staging>, generations: &mut Vec<Vec<u64>>, pending: Pending) {
    if let Some(staging) = pending.staging
        && spare.len() < SPARE_BUFFERS
        && staging.capacity() <= SPARE_BUFFER_MAX
    {
        spare.push(staging);
    }
    if pending.generations.capacity() > 0 && generations.len() < SPARE_BUFFERS {
        generations.push(pending.generations);
    }
}

impl Stage for CacheStage {
    type Pending = Pending;
    type Below = Box<dyn Engine>;
    const NAME: &'static str = "cache";

    fn push(&mut self, below: &mut Below<Self>, op: IoOp, tag: u64) -> io::Result<()> {
        match op {
            IoOp::Read { offset, iov } => self.read(below, offset, iov, tag),
            IoOp::Write { offset, iov } => {
                let len = iov.len() as u64;
                below.forward(op, pending(Kind::Change { offset, len }, tag))
            }
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                below.forward(op, pending(Kind::Change { offset, len }, tag))
            }
            IoOp::Flush => below.forward(op, pending(Kind::Plain, tag)),
        }
    }

    fn complete(&mut self, below: &mut Below<Self>, pending: Pending, result: i32) {
        if let Some((tag, result)) = self.finish(pending, result) {
            below.answer(tag, result);
        }
    }

    /// Read-ahead is not the worker's to drain, and a worker torn down with requests in flight
    /// leaves them here: nothing is copied to guest memory that may be gone, but a change still
    /// invalidates what it touched.
    fn abandon(&mut self, pending: Pending) {
        if let Kind::Change { offset, len } = pending.kind {
            self.cache.invalidate(offset, len);
        }
    }
}

impl Drop for CacheStage {
    fn drop(&mut self) {
        self.stats.retire(&self.counters);
    }
}
