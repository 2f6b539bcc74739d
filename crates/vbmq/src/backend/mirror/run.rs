//! One mirror, from `mirror-begin` to `mirror-end`: its destination, what the background copy
//! has done, and the chunks guest writes are changing, so that the copy never writes a chunk's
//! old contents over a guest write the destination already has.
//!
//! The rule, per chunk of [`CHUNK`] bytes: a guest write counts itself in the chunk's
//! `writers` before either side sees it, and on its completion (both sides) marks the chunk
//! `dirty` and uncounts itself. The copy clears `dirty`, skips a chunk with writers, reads it,
//! writes it to the destination, and keeps the result only if, once the destination answered,
//! the chunk is neither dirty nor written: any guest write that overlapped the copy's window
//! makes it copy the chunk again. A copy kept therefore read every guest write that reached
//! the destination before it, and none came after it.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};

use super::destination::Destination;

/// The background copy's unit, and the granularity of the race rule above.
pub const CHUNK: u64 = 1 << 20;

/// What `ctl list` and `ctl stats` show of a mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorState {
    /// The background copy runs: `copied` of `total` bytes are on the destination.
    Copying {
        /// Bytes copied.
        copied: u64,
        /// Bytes of the disk.
        total: u64,
    },
    /// The destination holds everything; every guest write goes to both sides.
    Ready {
        /// Bytes of the disk.
        total: u64,
    },
    /// The destination failed: the mirror stopped (the guest never saw it).
    Failed(String),
}

/// A running mirror.
pub struct Run {
    pub(super) destination: Box<dyn Destination>,
    capacity: u64,
    writers: Box<[AtomicU32]>,
    dirty: Box<[AtomicBool]>,
    /// Chunks the copy has on the destination for good.
    done_chunks: AtomicU64,
    copied: AtomicU64,
    failed: OnceLock<String>,
    /// `mirror-end` (or a failure): the copy stops.
    ended: AtomicBool,
    /// Signalled when the mirror becomes ready or fails.
    settled: (Mutex<()>, Condvar),
}

impl Run {
    /// A mirror of `capacity` bytes to `destination`.
    pub fn new(destination: Box<dyn Destination>, capacity: u64) -> Self {
        let chunks = usize::try_from(capacity.div_ceil(CHUNK)).unwrap_or(0);
        Run {
            destination,
            capacity,
            writers: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
            dirty: (0..chunks).map(|_| AtomicBool::new(false)).collect(),
            done_chunks: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            failed: OnceLock::new(),
            ended: AtomicBool::new(false),
            settled: (Mutex::new(()), Condvar::new()),
        }
    }

    /// Chunks in the disk.
    pub fn chunks(&self) -> usize {
        self.writers.len()
    }

    /// Bytes of the disk.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn range(&self, offset: u64, len: u64) -> Range<usize> {
        let first = usize::try_from(offset / CHUNK).unwrap_or(usize::MAX);
        let end = offset.saturating_add(len.max(1)).div_ceil(CHUNK);
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        first.min(self.chunks())..end.min(self.chunks())
    }

    /// A guest write of `[offset, offset + len)` begins (before either side sees it).
    pub fn write_begins(&self, offset: u64, len: u64) {
        for chunk in self.range(offset, len) {
            self.writers[chunk].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// That guest write is done on both sides (or given up).
    pub fn write_ends(&self, offset: u64, len: u64) {
        for chunk in self.range(offset, len) {
            self.dirty[chunk].store(true, Ordering::SeqCst);
            self.writers[chunk].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The copy of `chunk` may begin: clears its mark; false while guest writes are in it.
    pub fn copy_may_begin(&self, chunk: usize) -> bool {
        self.dirty[chunk].store(false, Ordering::SeqCst);
        self.writers[chunk].load(Ordering::SeqCst) == 0
    }

    /// The destination has the copy of `chunk` (`bytes` long): kept unless a guest write
    /// overlapped it, then true.
    pub fn copy_kept(&self, chunk: usize, bytes: u64) -> bool {
        if self.dirty[chunk].load(Ordering::SeqCst)
            || self.writers[chunk].load(Ordering::SeqCst) != 0
        {
            return false;
        }
        self.copied.fetch_add(bytes, Ordering::Relaxed);
        let done = self.done_chunks.fetch_add(1, Ordering::SeqCst) + 1;
        if done == self.chunks() as u64 {
            self.settle();
        }
        true
    }

    /// The destination failed: the mirror stops, for `why`.
    pub fn fail(&self, why: String) {
        if self.failed.set(why).is_ok() {
            crate::limited!(
                warn,
                "mirror failed: {}",
                self.failed.get().map_or("", |s| s)
            );
        }
        self.ended.store(true, Ordering::SeqCst);
        self.settle();
    }

    /// Whether the mirror failed.
    pub fn is_failed(&self) -> bool {
        self.failed.get().is_some()
    }

    /// `mirror-end`: the copy stops.
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.settle();
    }

    /// Whether the copy is to stop.
    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    fn settle(&self) {
        let _held = self.settled.0.lock().unwrap_or_else(|p| p.into_inner());
        self.settled.1.notify_all();
    }

    /// The mirror's state now.
    pub fn state(&self) -> MirrorState {
        if let Some(why) = self.failed.get() {
            return MirrorState::Failed(why.clone());
        }
        if self.done_chunks.load(Ordering::SeqCst) == self.chunks() as u64 {
            return MirrorState::Ready {
                total: self.capacity,
            };
        }
        MirrorState::Copying {
            copied: self.copied.load(Ordering::Relaxed),
            total: self.capacity,
        }
    }

    /// Waits until the mirror is ready, has failed or was ended; its state then.
    pub fn wait_settled(&self) -> MirrorState {
        let mut held = self.settled.0.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let state = self.state();
            if !matches!(state, MirrorState::Copying { .. }) || self.is_ended() {
                return state;
            }
            held = self.settled.1.wait(held).unwrap_or_else(|p| p.into_inner());
        }
    }
}
