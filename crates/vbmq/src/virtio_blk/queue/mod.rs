//! A virtio-blk queue's side of the queue core ([`QueueHandler`]): it owns the queue's engine,
//! in-flight table and buffers, parses each chain and hands it to the engine (one batch per
//! pass), and completes the requests into the used ring when the engine returns them.

mod inflight;
mod recovery;
mod requests;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use virtio_queue::{DescriptorChain, Queue};
use vm_memory::{GuestMemoryAtomic, GuestMemoryBackend as _, GuestMemoryRegion as _};

use self::inflight::InFlight;
use self::requests::Requests;
use super::BlkDevice;
use crate::backend::{Disk, Engine};
use crate::guest::GuestMemory;
use crate::guest::inflight_region::InflightRecord;
use crate::worker::{QueueHandler, QueueSettings, QueueStats, QueueWorker};

/// A virtio-blk queue's worker.
pub type BlkQueueWorker = QueueWorker<BlkQueue>;

/// What a virtio-blk queue's thread owns beside the ring: its engine, in-flight table and
/// in-flight record.
pub struct BlkQueue {
    index: usize,
    settings: QueueSettings,
    disk: Arc<dyn Disk>,
    /// What serving the requests takes: engine, in-flight table, counters, record.
    requests: Requests,
    /// Whether [`QueueHandler::set_up`] may open an engine (no: a confined process, whose
    /// engines were created before confinement and are lent to each connection's workers).
    may_open_engine: bool,
    /// The record is to be read against the ring before the next request is taken.
    recover: bool,
    /// The guest memory snapshot the engine was last shown (its address; 0: none).
    engine_memory: usize,
}

impl BlkQueue {
    /// A worker for queue `index` of `device`; it opens its engine on its own thread, in
    /// [`QueueWorker::set_up`].
    pub fn worker(
        index: usize,
        settings: QueueSettings,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        atomic_mem: GuestMemoryAtomic<GuestMemory>,
        stats: Arc<QueueStats>,
    ) -> BlkQueueWorker {
        let handler = BlkQueue {
            index,
            settings,
            disk,
            requests: Requests {
                engine: None,
                device,
                inflight: InFlight::new(usize::from(settings.max_size)),
                stats: stats.clone(),
                record: None,
                dirty_logging: Arc::new(AtomicBool::new(false)),
                clock: 0,
            },
            may_open_engine: true,
            recover: false,
            engine_memory: 0,
        };
        QueueWorker::new(index, settings, handler, atomic_mem, stats)
    }

    /// Submits what is queued and reaps completions into the used ring; returns the
    /// completions and the used entries added.
    fn reap(&mut self, queue: &mut Queue, mem: &GuestMemory, submit: bool) -> (usize, usize) {
        // Completions are timed apart from the requests taken in this pass.
        self.requests.clock = 0;
        let mut ctx = self.requests.ctx(self.index, mem);
        // Taken out of the context: completing a request never needs the engine.
        let Some(engine) = ctx.engine.take() else {
            return (0, 0);
        };
        if submit && let Err(e) = engine.submit() {
            crate::limited!(error, "I/O submission failed: {e}");
        }
        let mut completed = 0;
        loop {
            engine.reap(&mut |tag, result| {
                completed += 1;
                ctx.complete(tag, result);
            });
            if ctx.inflight.retries.is_empty() {
                break;
            }
            // Short transfers go on at once; an engine that completes at push time has their
            // results for the next round. Each round moves bytes or ends a request, so it ends.
            ctx.resubmit(engine.as_mut());
            if let Err(e) = engine.submit() {
                crate::limited!(error, "I/O submission failed: {e}");
            }
        }
        (completed, ctx.publish_finished(queue))
    }
}

impl QueueHandler for BlkQueue {
    const THREAD_NAME: &'static str = "vbmq-q";
    const LIMITED: bool = true;

    fn set_up(&mut self, _own_thread: bool) -> Option<RawFd> {
        self.requests.device.guest_gate.ring_starts();
        if self.requests.engine.is_none() && self.may_open_engine {
            match self.disk.engine(self.settings.engine_options()) {
                Ok(engine) => self.requests.engine = Some(engine),
                Err(e) => {
                    crate::limited!(
                        error,
                        "queue {}: cannot open its I/O engine: {e}",
                        self.index
                    )
                }
            }
        }
        if self.requests.engine.is_none() {
            crate::limited!(
                error,
                "queue {}: no I/O engine: its requests fail",
                self.index
            );
        }
        self.completion_fd()
    }

    /// Tells the engine which guest memory requests point into (an engine that registers it
    /// with the kernel must know), once per memory snapshot, with nothing in flight; and starts
    /// the pass's clock.
    fn use_memory(&mut self, mem: &GuestMemory) {
        self.requests.clock = 0;
        let address: *const GuestMemory = mem;
        if self.engine_memory == address as usize {
            return;
        }
        let Some(engine) = self.requests.engine.as_mut() else {
            return;
        };
        let regions: Vec<libc::iovec> = mem
            .iter()
            .filter_map(|region| {
                Some(libc::iovec {
                    iov_base: mem.get_host_address(region.start_addr()).ok()?.cast(),
                    iov_len: usize::try_from(region.len()).ok()?,
                })
            })
            .collect();
        // SAFETY: the worker keeps these mappings until its next snapshot, which the engine is
        // shown before this one is dropped (`QueueWorker::refresh_memory`), or until the engine
        // is taken back (`take_engine`, which shows it nothing).
        if let Err(e) = unsafe { engine.guest_memory(&regions) } {
            crate::limited!(
                warn,
                "queue {}: guest memory not registered with io_uring ({e}): requests use it \
                 unregistered",
                self.index
            );
        }
        self.engine_memory = address as usize;
    }

    fn hold_back(&self) -> Duration {
        let limits = &self.requests.device.limits;
        if limits.on() {
            limits.wait()
        } else {
            Duration::ZERO
        }
    }

    fn recovery_pending(&self) -> bool {
        self.recover
    }

    fn recover(&mut self, queue: &mut Queue, mem: &GuestMemory) -> (usize, usize) {
        self.recover = false;
        self.requests
            .ctx(self.index, mem)
            .recover(queue, self.index)
    }

    #[inline]
    fn start(
        &mut self,
        queue: &mut Queue,
        mem: &GuestMemory,
        chain: DescriptorChain<&GuestMemory>,
    ) -> usize {
        self.requests.ctx(self.index, mem).start(queue, chain)
    }

    fn complete(&mut self, queue: &mut Queue, mem: &GuestMemory, submit: bool) -> (usize, usize) {
        self.reap(queue, mem, submit)
    }

    fn in_flight(&self) -> usize {
        self.requests.inflight.count
    }

    fn wait(&mut self) -> Option<io::Result<()>> {
        self.requests.engine.as_mut().map(|engine| engine.wait())
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.requests
            .engine
            .as_ref()
            .and_then(|engine| engine.completion_fd())
    }

    fn ring_stopped(&mut self) {
        if !self.requests.inflight.finished.is_empty() {
            // Entries the used ring could not take: the ring they belong to is gone (a record
            // keeps them in flight, for the restarted ring to take them again).
            crate::limited!(
                warn,
                "queue {}: {} finished requests never returned to the stopped ring",
                self.index,
                self.requests.inflight.finished.len()
            );
            self.requests.inflight.finished.clear();
        }
        self.recover = self.requests.record.is_some();
    }
}

impl QueueWorker<BlkQueue> {
    /// The flag that says the frontend logs dirty pages (a live migration is under way).
    pub fn log_dirty_pages_on(&mut self, flag: Arc<AtomicBool>) {
        self.handler_mut().requests.dirty_logging = flag;
    }

    /// Gives the worker an engine created earlier (before confinement); it will open none.
    pub fn lend_engine(&mut self, engine: Option<Box<dyn Engine>>) {
        let blk = self.handler_mut();
        if blk.requests.inflight.count > 0 {
            // The engine in use still holds operations: never dropped (see `Drop`).
            std::mem::forget(blk.requests.engine.take());
        }
        blk.requests.engine = engine;
        blk.engine_memory = 0;
        blk.may_open_engine = false;
    }

    /// Takes the engine back once the worker has drained it: an engine with operations still
    /// in flight would complete them into the next connection's requests, so it is dropped.
    pub fn take_engine(&mut self) -> Option<Box<dyn Engine>> {
        let blk = self.handler_mut();
        if blk.requests.inflight.count > 0 {
            // Nor can it be dropped: the kernel may still carry its operations out, into memory
            // that would be unmapped. It stays with this worker, which leaks it (see `Drop`).
            crate::limited!(
                error,
                "queue {}: {} requests never completed; its engine is kept from reuse",
                blk.index,
                blk.requests.inflight.count
            );
            return None;
        }
        let mut engine = blk.requests.engine.take();
        blk.engine_memory = 0;
        if let Some(engine) = engine.as_mut() {
            // SAFETY: no regions: the departed guest's memory is let go.
            if let Err(e) = unsafe { engine.guest_memory(&[]) } {
                crate::limited!(warn, "queue {}: unregistering guest memory: {e}", blk.index);
            }
        }
        engine
    }

    /// Gives the worker its queue's in-flight record (`SET_INFLIGHT_FD`), read when the ring
    /// next starts.
    pub fn set_inflight_record(&mut self, record: Option<InflightRecord>) {
        let blk = self.handler_mut();
        blk.recover = record.is_some();
        blk.requests.record = record;
    }
}

impl Drop for BlkQueue {
    fn drop(&mut self) {
        if self.requests.inflight.count == 0 {
            return;
        }
        // Requests the engine never returned: the kernel may still read or write their guest
        // memory, and dropping an io_uring does not wait for its operations. The engine is
        // leaked rather than freed early (the worker leaks the guest memory, see its `Drop`).
        std::mem::forget(self.requests.engine.take());
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod tests;

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod short_transfer_tests;
