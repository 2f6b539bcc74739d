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
//!
//! For a resumption after a cut (`mirror-begin --resume`), each chunk is also `synced`: its
//! copy was kept and no guest write to it has failed to reach the destination since. A failed
//! mirror keeps clearing the mark of every chunk the guest writes, until the next mirror
//! begins and copies only the chunks not marked.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::destination::{Batch, Destination, Done, Remote};

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
    /// Chunks the destination holds as the disk has them (see the module's comment).
    synced: Box<[AtomicBool]>,
    /// The destination's answers, for the watchdog.
    progress: Arc<Progress>,
    /// How long the destination may leave every request unanswered before the mirror fails.
    timeout: Duration,
    /// Chunks the copy has on the destination for good.
    done_chunks: AtomicU64,
    copied: AtomicU64,
    /// Bytes the copy sent, again ones included (a resumed mirror sends only what changed).
    sent: AtomicU64,
    failed: OnceLock<String>,
    /// `mirror-end` (or a failure): the copy stops.
    ended: AtomicBool,
    /// Signalled when the mirror becomes ready or fails.
    settled: (Mutex<()>, Condvar),
}

impl Run {
    /// A mirror of `capacity` bytes to `destination`, failed if the destination leaves its
    /// requests unanswered for `timeout`.
    pub fn new(destination: Box<dyn Destination>, capacity: u64, timeout: Duration) -> Self {
        let chunks = usize::try_from(capacity.div_ceil(CHUNK)).unwrap_or(0);
        Run {
            destination,
            capacity,
            writers: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
            dirty: (0..chunks).map(|_| AtomicBool::new(false)).collect(),
            synced: (0..chunks).map(|_| AtomicBool::new(false)).collect(),
            progress: Arc::new(Progress::new()),
            timeout,
            done_chunks: AtomicU64::new(0),
            copied: AtomicU64::new(0),
            sent: AtomicU64::new(0),
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
        // Marked before the look: a guest write that begins after it and fails to reach the
        // destination clears the mark after this.
        self.synced[chunk].store(true, Ordering::SeqCst);
        if self.dirty[chunk].load(Ordering::SeqCst)
            || self.writers[chunk].load(Ordering::SeqCst) != 0
        {
            self.synced[chunk].store(false, Ordering::SeqCst);
            return false;
        }
        self.copied.fetch_add(bytes, Ordering::Relaxed);
        let done = self.done_chunks.fetch_add(1, Ordering::SeqCst) + 1;
        if done == self.chunks() as u64 {
            self.settle();
        }
        true
    }

    /// The destination may miss a guest write of `[offset, offset + len)`: the write's remote
    /// side failed, or the mirror has failed and the write goes to the disk alone.
    pub fn unsynced(&self, offset: u64, len: u64) {
        for chunk in self.range(offset, len) {
            self.synced[chunk].store(false, Ordering::SeqCst);
        }
    }

    /// The copy sent `bytes` to the destination.
    pub fn count_sent(&self, bytes: u64) {
        self.sent.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Bytes the copy sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Whether the destination holds `chunk` as the disk has it.
    pub fn is_synced(&self, chunk: usize) -> bool {
        self.synced[chunk].load(Ordering::SeqCst)
    }

    /// Resumes after `cut` (a failed mirror to the same destination, whose guest writes since
    /// have all completed): the chunks it had synced count as copied. Before the copy starts.
    /// Returns how many chunks were taken over.
    pub fn resume_from(&self, cut: &Run) -> usize {
        if cut.chunks() != self.chunks() {
            return 0;
        }
        let mut taken = 0;
        for (chunk, (mine, theirs)) in self.synced.iter().zip(cut.synced.iter()).enumerate() {
            if theirs.load(Ordering::SeqCst) {
                mine.store(true, Ordering::SeqCst);
                let offset = chunk as u64 * CHUNK;
                let bytes = (self.capacity - offset).min(CHUNK);
                self.copied.fetch_add(bytes, Ordering::Relaxed);
                taken += 1;
            }
        }
        let done = self.done_chunks.fetch_add(taken as u64, Ordering::SeqCst) + taken as u64;
        if done == self.chunks() as u64 {
            self.settle();
        }
        taken
    }

    /// Sends `request` to the destination, watched: the watchdog fails the mirror if no
    /// answer comes for the timeout while requests are in flight.
    pub fn submit(&self, request: Remote<'_>, done: Done) {
        self.submit_all(vec![(request, done)]);
    }

    /// Sends `requests` together, watched as [`Run::submit`].
    pub fn submit_all(&self, requests: Batch<'_>) {
        let watched = requests
            .into_iter()
            .map(|(request, done)| {
                let progress = self.progress.clone();
                progress.sent();
                let done: Done = Box::new(move |result| {
                    progress.answered();
                    done(result);
                });
                (request, done)
            })
            .collect();
        self.destination.submit_all(watched);
    }

    /// Sends `request` and waits for its outcome (watched as [`Run::submit`]).
    pub fn wait(&self, request: Remote<'_>) -> Result<(), String> {
        self.wait_within(request, None)
    }

    /// Sends `request` and waits for its outcome, at most `limit`: then the destination is
    /// cut off.
    fn wait_within(&self, request: Remote<'_>, limit: Option<Duration>) -> Result<(), String> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(
            request,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        let dropped = || Err("the NBD client dropped a request".into());
        let Some(limit) = limit else {
            return rx.recv().unwrap_or_else(|_| dropped());
        };
        match rx.recv_timeout(limit) {
            Ok(result) => result,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => dropped(),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                self.destination.abort();
                Err(format!("no answer for {} s", limit.as_secs()))
            }
        }
    }

    /// Flushes the destination (at `mirror-end`, once the watchdog is gone), waiting at most
    /// the timeout.
    pub fn flush(&self) -> Result<(), String> {
        self.wait_within(Remote::Flush, Some(self.timeout))
    }

    /// The watchdog's look: fails the mirror and cuts the destination off (which fails every
    /// request in flight, and wakes a writer blocked on a full socket) if requests have been
    /// in flight with no answer for the timeout. True once the mirror is over.
    pub fn watch(&self) -> bool {
        if self.is_ended() {
            return true;
        }
        if let Some(silent) = self.progress.silent_for()
            && silent >= self.timeout
        {
            self.fail(format!(
                "destination: no answer for {} s",
                self.timeout.as_secs()
            ));
            self.destination.abort();
            return true;
        }
        false
    }

    /// Waits for `period`, or less if the mirror settles or ends meanwhile.
    pub fn pause(&self, period: Duration) {
        let held = self.settled.0.lock().unwrap_or_else(|p| p.into_inner());
        if !self.is_ended() {
            let _ = self.settled.1.wait_timeout(held, period);
        }
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

/// Requests to the destination in flight, and when it last answered.
struct Progress {
    born: Instant,
    in_flight: AtomicU64,
    /// Milliseconds from `born` to the last answer, or to the first request sent after a
    /// time with none in flight (an idle destination is not a silent one).
    last_answer_ms: AtomicU64,
}

impl Progress {
    fn new() -> Self {
        Progress {
            born: Instant::now(),
            in_flight: AtomicU64::new(0),
            last_answer_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn sent(&self) {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            self.last_answer_ms.store(self.now_ms(), Ordering::SeqCst);
        }
    }

    fn answered(&self) {
        self.last_answer_ms.store(self.now_ms(), Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// How long requests have been in flight with no answer (none: nothing in flight).
    fn silent_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let last = self.last_answer_ms.load(Ordering::SeqCst);
        Some(Duration::from_millis(self.now_ms().saturating_sub(last)))
    }
}
