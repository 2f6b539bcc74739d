//! One virtio-fs queue's worker. Like the block worker, it runs on the thread dedicated to its
//! queue, pinned to the queue's CPU, and in `poll` and `adaptive` modes keeps spinning on the
//! avail ring instead of returning to epoll. A FUSE request is served where it is taken: its
//! header and arguments are copied once into the worker's buffer (`RequestCopy`, allocated with
//! the worker), the passthrough reads and writes data straight between the host file and the
//! guest's buffers (`preadv`/`pwritev` on the page cache, the fastest host path for cached
//! files), and every reply of a pass is published with one notification.

use std::hint::spin_loop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vhost_user_backend::VringT;
use virtio_queue::QueueT;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};

use super::affinity::{name_current_thread, pin_current_thread};
use super::ring_setup::{RingSetup, stop_outside_memory};
use super::stats::QueueStats;
use super::{QueueSettings, WaitMode};
use crate::guest::{GuestMemory, Vring};
use crate::timer::now_ns;
use crate::virtio_fs::{FsDevice, RequestCopy, thread_umask};

/// The state a virtio-fs queue's thread owns.
pub struct FsQueueWorker {
    index: usize,
    settings: QueueSettings,
    device: Arc<FsDevice>,
    /// The request being served, copied out of guest memory (see `RequestCopy`).
    copy: RequestCopy,
    atomic_mem: GuestMemoryAtomic<GuestMemory>,
    stats: Arc<QueueStats>,
    set_up: bool,
    /// A ring set-up the driver or frontend broke: not served until it is set up again.
    broken: Option<RingSetup>,
    /// Set when the driver broke the ring, for the connection to be closed.
    ring_broken: Arc<AtomicBool>,
    /// The ring placement last found wholly inside guest memory (checked again when the ring
    /// or the memory map changes, not on every pass).
    checked: Option<RingSetup>,
    /// When the thread went back to sleep (`now_ns`; 0: it is awake).
    asleep_since: u64,
}

/// A request is completed within the pass that takes it: once the serving thread has left its
/// pass, nothing is in flight.
impl super::Drain for FsQueueWorker {
    fn drain_in_flight(&mut self) -> usize {
        0
    }
}

impl FsQueueWorker {
    /// A worker for queue `index` (0 is the high-priority queue).
    pub fn new(
        index: usize,
        settings: QueueSettings,
        device: Arc<FsDevice>,
        atomic_mem: GuestMemoryAtomic<GuestMemory>,
        stats: Arc<QueueStats>,
    ) -> Self {
        FsQueueWorker {
            index,
            settings,
            device,
            copy: RequestCopy::default(),
            atomic_mem,
            stats,
            set_up: false,
            broken: None,
            ring_broken: Arc::new(AtomicBool::new(false)),
            checked: None,
            asleep_since: 0,
        }
    }

    /// The flag to set when the driver breaks the ring, for the connection to be closed.
    pub fn report_broken_ring_to(&mut self, flag: Arc<AtomicBool>) {
        self.ring_broken = flag;
    }

    /// Serves the queue after a kick or the ring being enabled, in the queue's mode; returns
    /// when the thread should sleep in epoll again, or when `stop` is set.
    pub fn run(&mut self, vring: &Vring, stop: &AtomicBool) {
        if !self.set_up {
            self.set_up = true;
            name_current_thread(&format!("vbmq-fs-q{}", self.index));
            if let Err(e) = thread_umask::clear_for_this_thread() {
                crate::limited!(
                    warn,
                    "fs queue {}: the process umask applies to files guests create: {e}",
                    self.index
                );
            }
            if let Some(cpu) = self.settings.cpu
                && let Err(e) = pin_current_thread(cpu)
            {
                crate::limited!(
                    warn,
                    "fs queue {}: cannot pin to CPU {cpu}: {e}",
                    self.index
                );
            }
        }
        if self.asleep_since != 0 {
            self.stats.slept(now_ns().saturating_sub(self.asleep_since));
        }
        match self.settings.mode {
            WaitMode::Event => {
                self.pass(vring, true);
            }
            WaitMode::Poll => self.poll(vring, stop, None),
            WaitMode::Adaptive => self.poll(vring, stop, Some(self.settings.poll)),
        }
        self.asleep_since = now_ns();
    }

    /// Spins on the queue; with `idle_limit`, goes back to sleep after that long without work.
    fn poll(&mut self, vring: &Vring, stop: &AtomicBool, idle_limit: Option<Duration>) {
        self.set_kicks(vring, false);
        let mut idle_since: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            let Some(served) = self.pass(vring, false) else {
                return;
            };
            if served > 0 {
                idle_since = None;
                continue;
            }
            let Some(limit) = idle_limit else {
                spin_loop();
                continue;
            };
            let now = Instant::now();
            if now.duration_since(*idle_since.get_or_insert(now)) < limit {
                spin_loop();
                continue;
            }
            // Re-arm kicks, then look once more: a request that arrived in between would
            // otherwise wait for a kick the guest never sends.
            if self.set_kicks(vring, true) {
                idle_since = None;
                continue;
            }
            return;
        }
    }

    /// Turns the guest's kicks on or off; true if requests arrived meanwhile.
    fn set_kicks(&self, vring: &Vring, on: bool) -> bool {
        let mem = self.atomic_mem.memory();
        let mut state = vring.get_mut();
        let queue = state.get_queue_mut();
        if on {
            queue.enable_notification(&*mem).unwrap_or(false)
        } else {
            let _ = queue.disable_notification(&*mem);
            false
        }
    }

    /// One pass: serve every request the ring offers and notify the guest once. `None` when
    /// the ring cannot be served (not started, not enabled, or broken).
    fn pass(&mut self, vring: &Vring, rearm: bool) -> Option<usize> {
        // No request outlives its pass, so each pass reads the current memory map.
        let mem = self.atomic_mem.memory();
        let mut state = vring.get_mut();
        let setup = RingSetup::of(state.get_queue(), &mem);
        if self.broken.is_some_and(|broken| broken != setup) {
            self.broken = None;
        }
        if !state.get_queue().ready() || !state.is_enabled() || self.broken.is_some() {
            return None;
        }
        let queue = state.get_queue_mut();
        let mut served = 0;
        loop {
            if rearm && queue.disable_notification(&*mem).is_err() {
                break;
            }
            let Ok(avail) = queue.avail_idx(&*mem, Ordering::Acquire) else {
                stop_outside_memory(self.index, &mut self.broken, setup);
                break;
            };
            let mut waiting = avail.0.wrapping_sub(queue.next_avail());
            if waiting > queue.size() {
                crate::limited!(
                    warn,
                    "fs queue {}: avail index {} is {waiting} entries ahead of a {}-entry ring; \
                     queue stopped, closing the connection for the frontend to reset it",
                    self.index,
                    avail.0,
                    queue.size()
                );
                self.ring_broken.store(true, Ordering::Release);
                self.broken = Some(setup);
                break;
            }
            if waiting > 0 && self.checked != Some(setup.placement()) {
                if !setup.fits(&mem) {
                    stop_outside_memory(self.index, &mut self.broken, setup);
                    break;
                }
                self.checked = Some(setup.placement());
            }
            while waiting > 0 {
                let Some(chain) = queue.pop_descriptor_chain(&*mem) else {
                    break;
                };
                waiting -= 1;
                let head = chain.head_index();
                let written = self.device.handle(&mem, chain, &mut self.copy);
                if let Err(e) = queue.add_used(&*mem, head, written) {
                    crate::limited!(
                        warn,
                        "fs queue {}: cannot return a request: {e}",
                        self.index
                    );
                }
                served += 1;
            }
            if !rearm || !queue.enable_notification(&*mem).unwrap_or(false) {
                break;
            }
        }
        if served > 0 {
            let needed = queue.needs_notification(&*mem).unwrap_or(true);
            if needed && let Err(e) = state.signal_used_queue() {
                crate::limited!(debug, "cannot notify the guest: {e}");
            }
        }
        self.stats.pass(served > 0, 0);
        self.stats.served(served as u64);
        Some(served)
    }
}
