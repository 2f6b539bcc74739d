//! `vbmq ctl mirror-begin`: a disk copied to another host's disk while its guest runs, for
//! the migration of a VM whose disk is on the source host's own storage (QEMU's
//! `drive-mirror` with `copy-mode=write-blocking`, for vhost-user disks).
//!
//! [`MirrorDisk`] sits at the top of every disk's stack (under the test-only delay layer), or
//! right under the cipher of an `encrypt=` disk: the destination receives the disk as it is
//! stored, ciphertext included, and needs the key only to serve a guest (a writable export
//! writes at the same level, see `host::exports`). From `mirror-begin` on, every guest write,
//! write-zeroes, discard and flush goes to both sides before the guest hears of it (see
//! `engine`), and a background copy sends every chunk of the disk once (see `copy` and `run`
//! for why a chunk the guest writes meanwhile is never left stale). Once the copy is done, the
//! mirror is ready: the destination holds everything the guest was told is written, and keeps
//! holding it for as long as the mirror runs. A destination that fails or goes away fails the
//! mirror: the guest's writes go on to the source alone and never see the error; so does one
//! that stops answering for the mirror's timeout (see `watchdog`). A mirror begun again with
//! `resume` after such a cut copies only the chunks the guest changed since, or that the
//! destination missed (see `run`).
//!
//! Cost when no mirror runs: one acquire load of an atomic flag per operation pushed.

mod copy;
pub mod destination;
mod engine;
mod run;
mod watchdog;

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use self::destination::Destination;
use self::engine::MirrorEngine;
pub use self::run::MirrorState;
use self::run::Run;
use super::{Disk, Engine, EngineOptions, Geometry};

/// What the queues' engines share with the disk.
pub(crate) struct Control {
    /// Raised while a mirror runs: the engines' only look on their path.
    active: AtomicBool,
    /// Counts the mirrors begun, so that an engine keeps the current one without a lock.
    generation: AtomicU64,
    run: Mutex<Option<Arc<Run>>>,
    /// The failed mirror a `resume` begun takes its synced chunks from, until the copy starts.
    cut: Mutex<Option<Arc<Run>>>,
    /// The background copy's threads and the watchdog.
    copiers: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Control {
    fn run(&self) -> Option<Arc<Run>> {
        lock(&self.run).clone()
    }
}

/// A disk that can be mirrored while it serves.
pub struct MirrorDisk {
    inner: Arc<dyn Disk>,
    control: Arc<Control>,
}

fn refused(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.into())
}

impl MirrorDisk {
    /// Over `inner`.
    pub fn new(inner: Arc<dyn Disk>) -> Self {
        MirrorDisk {
            inner,
            control: Arc::new(Control {
                active: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                run: Mutex::new(None),
                cut: Mutex::new(None),
                copiers: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Begins mirroring to `destination` (an export of the disk's size that takes writes),
    /// failed if the destination leaves requests unanswered for `timeout`: from now on every
    /// guest write pushed goes to both sides. With `resume`, the disk's last mirror must have
    /// failed (and not been ended): the copy then sends only the chunks that destination may
    /// not hold. The caller then waits for the writes pushed before to complete
    /// ([`MirrorDisk::copy`] after that).
    pub fn begin(
        &self,
        destination: Box<dyn Destination>,
        timeout: Duration,
        resume: bool,
    ) -> io::Result<()> {
        let capacity = self.inner.geometry().capacity;
        if destination.read_only() {
            return Err(refused("the destination is read-only"));
        }
        if destination.size() != capacity {
            return Err(refused(format!(
                "the destination has {} bytes, the disk {capacity}",
                destination.size()
            )));
        }
        let mut current = lock(&self.control.run);
        if current.as_ref().is_some_and(|run| !run.is_ended()) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "a mirror of this disk runs already (mirror-end first)",
            ));
        }
        let cut = current.take();
        if resume && !cut.as_ref().is_some_and(|run| run.is_failed()) {
            *current = cut;
            return Err(refused(
                "nothing to resume: no failed mirror of this disk (mirror-end forgets one)",
            ));
        }
        *current = Some(Arc::new(Run::new(destination, capacity, timeout)));
        self.control.generation.fetch_add(1, Ordering::SeqCst);
        self.control.active.store(true, Ordering::SeqCst);
        drop(current);
        if let Some(cut) = cut {
            // Its copy's threads end with it; its destination is cut off.
            cut.destination.abort();
            for thread in std::mem::take(&mut *lock(&self.control.copiers)) {
                let _ = thread.join();
            }
            if resume {
                *lock(&self.control.cut) = Some(cut);
            }
        }
        Ok(())
    }

    /// Starts the background copy and the watchdog: every write pushed before
    /// [`MirrorDisk::begin`] is done (so a resumed mirror's cut has marked them all).
    pub fn copy(&self) {
        let Some(run) = self.control.run() else {
            return;
        };
        if let Some(cut) = lock(&self.control.cut).take() {
            let kept = run.resume_from(&cut);
            crate::limited!(
                info,
                "mirror resumed: {kept} of {} chunks kept from before the cut",
                run.chunks()
            );
        }
        let mut threads = copy::start(self.inner.clone(), run.clone());
        match watchdog::start(run.clone()) {
            Ok(thread) => threads.push(thread),
            Err(e) => run.fail(format!("no thread for the watchdog: {e}")),
        }
        *lock(&self.control.copiers) = threads;
    }

    /// The running (or last) mirror's state, if any.
    pub fn state(&self) -> Option<MirrorState> {
        self.control.run().map(|run| run.state())
    }

    /// Waits until the mirror is ready or has failed; its state then.
    pub fn wait_settled(&self) -> Option<MirrorState> {
        self.control.run().map(|run| run.wait_settled())
    }

    /// Stops sending guest writes to the destination (`end`); then, once the writes pushed
    /// before are done ([`MirrorDisk::finish`]), the destination is flushed and disconnected.
    pub fn stop(&self) -> Option<MirrorState> {
        let run = self.control.run()?;
        self.control.active.store(false, Ordering::SeqCst);
        let state = run.state();
        run.end();
        Some(state)
    }

    /// Ends the stopped mirror: its copy's threads joined, the destination flushed (if it has
    /// not failed) and disconnected.
    pub fn finish(&self) {
        lock(&self.control.cut).take();
        let Some(run) = lock(&self.control.run).take() else {
            return;
        };
        self.control.generation.fetch_add(1, Ordering::SeqCst);
        let copiers = std::mem::take(&mut *lock(&self.control.copiers));
        for thread in copiers {
            let _ = thread.join();
        }
        if !run.is_failed()
            && let Err(e) = run.flush()
        {
            crate::limited!(warn, "mirror-end: the destination's flush failed: {e}");
        }
        run.destination.abort();
    }
}

impl Disk for MirrorDisk {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        let inner = self.inner.engine(options)?;
        Ok(Box::new(MirrorEngine::new(
            inner,
            self.control.clone(),
            options.notify,
        )?))
    }

    fn supports_discard(&self) -> bool {
        self.inner.supports_discard()
    }

    /// The disk's counters, and while a mirror runs or after it failed, its progress.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        let mut stats = self.inner.stats();
        if let Some(run) = self.control.run() {
            let (copied, ready, failed) = match run.state() {
                MirrorState::Copying { copied, .. } => (copied, 0, 0),
                MirrorState::Ready { total } => (total, 1, 0),
                MirrorState::Failed(_) => (0, 0, 1),
            };
            stats.extend([
                ("mirror_copied_bytes", copied),
                ("mirror_sent_bytes", run.sent()),
                ("mirror_total_bytes", run.capacity()),
                ("mirror_ready", ready),
                ("mirror_failed", failed),
            ]);
        }
        stats
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        if self.control.active.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "a mirror of this disk runs (mirror-end first)",
            ));
        }
        self.inner.resize(bytes, shrink)
    }

    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        self.inner.on_resize(listener);
    }

    fn close(&self) {
        self.inner.close();
    }
}
