//! One virtqueue's worker. It runs on the vhost-user-backend epoll thread dedicated to this
//! queue, pinned to the queue's CPU; in `poll` and `adaptive` modes it keeps that thread
//! spinning on the avail ring and the completion queue instead of returning to epoll.

use std::hint::spin_loop;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::guest::{GuestMemory, Vring};
use vhost_user_backend::{VringState, VringT};
use virtio_queue::QueueT;
use vm_memory::{
    GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend as _, GuestMemoryRegion as _,
};

use super::WaitMode;
use super::affinity::{name_current_thread, pin_current_thread};
use super::inflight::InFlight;
use super::requests::{Ctx, Requests};
use super::ring_setup::{RingSetup, stop_outside_memory};
use super::stats::QueueStats;
use crate::backend::{Disk, Engine, EngineOptions};
use crate::guest::inflight_region::InflightRecord;
use crate::timer::{Timer, now_ns};
use crate::virtio_blk::BlkDevice;

/// Failed waits after which [`QueueWorker::drain`] gives up on the requests in flight.
const DRAIN_ATTEMPTS: u32 = 100;

/// How a queue's worker runs.
#[derive(Clone, Copy, Debug)]
pub struct QueueSettings {
    /// How the thread waits.
    pub mode: WaitMode,
    /// Adaptive mode: how long to keep polling after the last request.
    pub poll: Duration,
    /// The CPU the thread is pinned to.
    pub cpu: Option<usize>,
    /// Submit a pass's requests together (`false`: one system call each).
    pub batch: bool,
    /// Largest queue size the frontend may set.
    pub max_size: u16,
}

impl QueueSettings {
    /// What this queue asks of its engine.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            depth: u32::from(self.max_size) * 2,
            batch: self.batch,
            notify: self.mode != WaitMode::Poll,
        }
    }
}

/// What one pass over the queue found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pass {
    /// The ring is started, enabled and not broken.
    pub ready: bool,
    /// Requests taken off the ring.
    pub started: usize,
    /// Engine completions reaped.
    pub completed: usize,
    /// The disk's limits held requests back in the ring.
    pub limited: bool,
}

/// The state a queue's thread owns: engine, in-flight table and guest-memory snapshot.
pub struct QueueWorker {
    index: usize,
    settings: QueueSettings,
    disk: Arc<dyn Disk>,
    atomic_mem: GuestMemoryAtomic<GuestMemory>,
    /// What serving the requests takes: guest memory, engine, in-flight table, counters.
    requests: Requests,
    /// Ends the polling loop like `stop` (see [`Self::stop_also_on`]).
    also_stop: Arc<AtomicBool>,
    /// Set when the driver broke the ring: the connection is to be closed (see
    /// [`Self::report_broken_ring_to`]).
    ring_broken: Arc<AtomicBool>,
    /// Whether [`Self::set_up`] may open an engine (no: a confined process, whose engines were
    /// created before confinement and are lent to each connection's workers).
    may_open_engine: bool,
    vring: Option<Vring>,
    set_up: bool,
    /// The ring set-up the driver or frontend broke (an avail index further ahead than the ring
    /// holds, or a ring not wholly inside guest memory): not served until the frontend sets the
    /// ring up again (virtio's NEEDS_RESET).
    broken: Option<RingSetup>,
    /// The ring placement last found wholly inside guest memory.
    checked: Option<RingSetup>,
    /// The record is to be read against the ring before the next request is taken.
    recover: bool,
    /// Armed when the disk's limits hold requests back: it wakes a sleeping thread.
    limit_timer: Option<Timer>,
    /// The last pass was held back by the limits: sleep, the timer wakes the thread.
    limited: bool,
    /// When this queue's own thread went back to sleep (`now_ns`; 0: it is awake).
    asleep_since: u64,
    /// The guest memory snapshot the engine was last shown (its address; 0: none).
    engine_memory: usize,
}

impl QueueWorker {
    /// A worker for queue `index`; it opens its engine on its own thread, in [`Self::set_up`].
    pub fn new(
        index: usize,
        settings: QueueSettings,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        atomic_mem: GuestMemoryAtomic<GuestMemory>,
        stats: Arc<QueueStats>,
    ) -> Self {
        let mem = atomic_mem.memory().into_inner();
        QueueWorker {
            index,
            requests: Requests {
                mem,
                engine: None,
                device,
                inflight: InFlight::new(usize::from(settings.max_size)),
                stats,
                record: None,
                dirty_logging: Arc::new(AtomicBool::new(false)),
            },
            settings,
            disk,
            atomic_mem,
            may_open_engine: true,
            also_stop: Arc::new(AtomicBool::new(false)),
            ring_broken: Arc::new(AtomicBool::new(false)),
            vring: None,
            set_up: false,
            broken: None,
            checked: None,
            recover: false,
            limit_timer: Timer::new()
                .map_err(|e| {
                    crate::limited!(warn, "queue {index}: no timer for I/O limits: {e}");
                })
                .ok(),
            limited: false,
            asleep_since: 0,
            engine_memory: 0,
        }
    }

    /// Prepares the worker: opens its engine and, on a thread of its own (`own_thread`), names
    /// that thread and pins it. Returns the engine's completion eventfd the first time, for the
    /// caller to wait on.
    pub fn set_up(&mut self, vring: &Vring, own_thread: bool) -> Option<RawFd> {
        if self.set_up {
            return None;
        }
        self.set_up = true;
        self.vring = Some(vring.clone());
        if own_thread {
            name_current_thread(&format!("vbmq-q{}", self.index));
            if let Some(cpu) = self.settings.cpu
                && let Err(e) = pin_current_thread(cpu)
            {
                crate::limited!(warn, "queue {}: cannot pin to CPU {cpu}: {e}", self.index);
            }
        }
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
        self.requests
            .engine
            .as_ref()
            .and_then(|engine| engine.completion_fd())
    }

    /// Serves the queue after a kick, a completion or the ring being enabled, in the queue's
    /// mode. Returns when the thread should sleep in epoll again, or when `stop` is set.
    pub fn run(&mut self, vring: &Vring, stop: &AtomicBool) {
        if self.asleep_since != 0 {
            self.requests
                .stats
                .slept(now_ns().saturating_sub(self.asleep_since));
        }
        self.run_mode(vring, stop);
        self.asleep_since = now_ns();
    }

    fn run_mode(&mut self, vring: &Vring, stop: &AtomicBool) {
        match self.settings.mode {
            WaitMode::Event => {
                self.pass(vring, true, u16::MAX);
            }
            WaitMode::Poll => self.poll(vring, stop, None),
            WaitMode::Adaptive => self.poll(vring, stop, Some(self.settings.poll)),
        }
    }

    /// Spins on the queue; with `idle_limit`, goes back to sleep after that long without work.
    fn poll(&mut self, vring: &Vring, stop: &AtomicBool, idle_limit: Option<Duration>) {
        self.refresh_memory(vring);
        self.suppress_kicks(vring);
        let mut idle_since: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) && !self.also_stop.load(Ordering::Relaxed) {
            let pass = self.pass(vring, false, u16::MAX);
            if !pass.ready && self.requests.inflight.count == 0 {
                return;
            }
            if pass.started + pass.completed > 0 {
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
            if self.rearm_kicks(vring) {
                idle_since = None;
                continue;
            }
            return;
        }
    }

    fn suppress_kicks(&mut self, vring: &Vring) {
        let mut state = vring.get_mut();
        if let Err(e) = state
            .get_queue_mut()
            .disable_notification(&*self.requests.mem)
        {
            crate::limited!(
                debug,
                "queue {}: cannot disable notifications: {e}",
                self.index
            );
        }
    }

    /// Enables guest kicks; true if requests arrived meanwhile (requests the limits hold
    /// back do not count: the limit timer wakes the thread for them).
    fn rearm_kicks(&mut self, vring: &Vring) -> bool {
        let mut state = vring.get_mut();
        let queue = state.get_queue_mut();
        if !queue
            .enable_notification(&*self.requests.mem)
            .unwrap_or(false)
            || self.limited
        {
            return false;
        }
        // Entries an avail index past the ring claims cannot be taken: sleep all the same.
        queue
            .avail_idx(&*self.requests.mem, Ordering::Acquire)
            .is_ok_and(|avail| avail.0.wrapping_sub(queue.next_avail()) <= queue.size())
    }

    /// Switches to the current guest memory once nothing in flight points into the old one.
    /// Returns false if requests are still in flight: the old memory is kept, mapped, for them.
    fn refresh_memory(&mut self, vring: &Vring) -> bool {
        let current = self.atomic_mem.memory();
        if std::ptr::eq(&*current, &*self.requests.mem) {
            return true;
        }
        drop(current);
        if !self.drain(vring) {
            return false;
        }
        let old = std::mem::replace(
            &mut self.requests.mem,
            self.atomic_mem.memory().into_inner(),
        );
        // The engine lets go of the old mappings before they can be unmapped.
        self.show_engine_memory();
        drop(old);
        true
    }

    /// Tells the engine which guest memory requests point into (an engine that registers it
    /// with the kernel must know), once per memory snapshot, with nothing in flight.
    fn show_engine_memory(&mut self) {
        let mem: *const GuestMemory = &*self.requests.mem;
        if self.engine_memory == mem as usize {
            return;
        }
        let Some(engine) = self.requests.engine.as_mut() else {
            return;
        };
        let regions: Vec<libc::iovec> = self
            .requests
            .mem
            .iter()
            .filter_map(|region| {
                Some(libc::iovec {
                    iov_base: self
                        .requests
                        .mem
                        .get_host_address(region.start_addr())
                        .ok()?
                        .cast(),
                    iov_len: usize::try_from(region.len()).ok()?,
                })
            })
            .collect();
        // SAFETY: `self.requests.mem` keeps these mappings until the next snapshot, which the engine is
        // shown before this one is dropped (`refresh_memory`), or until the engine is taken
        // back (`take_engine`, which shows it nothing).
        if let Err(e) = unsafe { engine.guest_memory(&regions) } {
            crate::limited!(
                warn,
                "queue {}: guest memory not registered with io_uring ({e}): requests use it \
                 unregistered",
                self.index
            );
        }
        self.engine_memory = mem as usize;
    }

    /// One pass: take the available requests (at most `budget`), submit them together, complete
    /// what is done, and notify the guest once. `rearm` keeps kicks enabled (event mode).
    fn pass(&mut self, vring: &Vring, rearm: bool, budget: u16) -> Pass {
        self.show_engine_memory();
        loop {
            let (pass, stale) = self.pass_with_current_memory(vring, rearm, budget);
            if !stale || !self.refresh_memory(vring) {
                return pass;
            }
        }
    }

    /// A pass that stops before popping a request the current memory snapshot may not map: the
    /// frontend publishes requests only after a memory table change was acknowledged, so the
    /// snapshot is checked after the avail index is read, and only requests below that index are
    /// taken. Returns true in the second field if the snapshot must be replaced first.
    fn pass_with_current_memory(
        &mut self,
        vring: &Vring,
        rearm: bool,
        budget: u16,
    ) -> (Pass, bool) {
        let mut state = vring.get_mut();
        let atomic_mem = &self.atomic_mem;
        let limit_timer = self.limit_timer.as_ref();
        let mut ctx = self.requests.ctx(self.index);
        let setup = RingSetup::of(state.get_queue(), ctx.mem);
        if self.broken.is_some_and(|broken| broken != setup) {
            // A new ring address, size, base index or memory table: the ring was set up anew.
            self.broken = None;
        }
        let mut pass = Pass {
            ready: state.get_queue().ready() && state.is_enabled() && self.broken.is_none(),
            ..Pass::default()
        };
        let mut stale = false;
        let mut used = 0;
        if pass.ready && self.recover {
            // What a process before this one left in flight goes first, read through the
            // current memory map.
            if !std::ptr::eq(&*atomic_mem.memory(), ctx.mem) {
                return (pass, true);
            }
            self.recover = false;
            let (started, added) = ctx.recover(state.get_queue_mut(), self.index);
            pass.started += started;
            used += added;
        }
        if pass.ready {
            let queue = state.get_queue_mut();
            loop {
                if rearm && queue.disable_notification(ctx.mem).is_err() {
                    // The ring is not in this snapshot: the frontend may have sent its memory
                    // table since (the first request of a VM's BIOS comes right after).
                    stale = !std::ptr::eq(&*atomic_mem.memory(), ctx.mem);
                    if !stale && !setup.fits(ctx.mem) {
                        stop_outside_memory(self.index, &mut self.broken, setup);
                        pass.ready = false;
                    }
                    break;
                }
                let avail = queue.avail_idx(ctx.mem, Ordering::Acquire);
                let mut waiting = avail
                    .as_ref()
                    .map_or(0, |idx| idx.0.wrapping_sub(queue.next_avail()));
                if waiting > queue.size() {
                    // No driver can make more entries available than the ring holds. Stop at
                    // once, say so once, and have the connection closed: the frontend then
                    // resets the device (a stopped queue alone would stall the guest silently).
                    crate::limited!(
                        warn,
                        "queue {}: avail index {} is {waiting} entries ahead of a {}-entry ring; \
                         queue stopped, closing the connection for the frontend to reset it",
                        self.index,
                        queue.next_avail().wrapping_add(waiting),
                        queue.size()
                    );
                    self.ring_broken.store(true, Ordering::Release);
                    self.broken = Some(setup);
                    pass.ready = false;
                    break;
                }
                // Only when there is work (or the ring is not mapped at all) is the snapshot
                // compared with the current map: an idle poll stays cheap.
                if (waiting > 0 || avail.is_err()) && !std::ptr::eq(&*atomic_mem.memory(), ctx.mem)
                {
                    stale = true;
                    break;
                }
                // The memory table may have changed since SET_VRING_ADDR checked the ring.
                if (waiting > 0 || avail.is_err()) && self.checked != Some(setup.placement()) {
                    if avail.is_ok() && setup.fits(ctx.mem) {
                        self.checked = Some(setup.placement());
                    } else {
                        stop_outside_memory(self.index, &mut self.broken, setup);
                        pass.ready = false;
                        break;
                    }
                }
                let offered = waiting;
                waiting = waiting.min(budget);
                while waiting > 0 {
                    if ctx.device.limits.on() {
                        let wait = ctx.device.limits.wait();
                        if !wait.is_zero() {
                            // Left in the ring; the timer wakes the thread when they may go.
                            if let Some(timer) = limit_timer {
                                timer.arm(wait);
                            }
                            pass.limited = true;
                            break;
                        }
                    }
                    let Some(chain) = queue.pop_descriptor_chain(ctx.mem) else {
                        break;
                    };
                    waiting -= 1;
                    pass.started += 1;
                    used += ctx.start(queue, chain);
                }
                if pass.limited || !rearm || !queue.enable_notification(ctx.mem).unwrap_or(false) {
                    break;
                }
                // Go round again for requests that arrived meanwhile, never for entries that
                // cannot be taken (an avail index past the ring): that would spin forever.
                if offered > 0 && (waiting == offered || offered > budget) {
                    break;
                }
            }
        }
        // Completions are timed apart from the requests taken in this pass.
        ctx.clock = 0;
        used += Self::reap(&mut ctx, &mut state, true, &mut pass);
        if used > 0 {
            Self::notify_guest(&mut state, ctx.mem);
        }
        self.limited = pass.limited;
        self.requests.stats.pass(
            pass.started + pass.completed > 0,
            self.requests.inflight.count,
        );
        (pass, stale)
    }

    /// Submits what is queued and reaps completions into the used ring.
    fn reap(
        ctx: &mut Ctx<'_>,
        state: &mut VringState<GuestMemoryAtomic<GuestMemory>>,
        submit: bool,
        pass: &mut Pass,
    ) -> usize {
        let Some(engine) = ctx.engine.take() else {
            return 0;
        };
        if submit && let Err(e) = engine.submit() {
            crate::limited!(error, "I/O submission failed: {e}");
        }
        let queue = state.get_queue_mut();
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
        let used = ctx.publish_finished(queue);
        ctx.engine = Some(engine);
        pass.completed += completed;
        used
    }

    fn notify_guest(state: &mut VringState<GuestMemoryAtomic<GuestMemory>>, mem: &GuestMemory) {
        let needed = state
            .get_queue_mut()
            .needs_notification(mem)
            .unwrap_or(true);
        if needed && let Err(e) = state.signal_used_queue() {
            crate::limited!(debug, "cannot notify the guest: {e}");
        }
    }

    /// The limit timer's descriptor, for the serving thread to wait on.
    pub fn limit_timer_fd(&self) -> Option<RawFd> {
        self.limit_timer.as_ref().map(Timer::fd)
    }

    /// Clears the completion eventfd (and the limit timer) after it woke the thread.
    pub fn clear_completion_event(&self) {
        if let Some(timer) = &self.limit_timer {
            timer.clear();
        }
        if let Some(fd) = self
            .requests
            .engine
            .as_ref()
            .and_then(|engine| engine.completion_fd())
        {
            let mut value = 0u64;
            // SAFETY: reads 8 bytes into a u64 from an eventfd the engine owns.
            let _ = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
        }
    }

    /// Completes every request in flight, blocking until the engine returns them all. Returns
    /// false if the engine keeps failing to wait for them: they are still in flight then, and
    /// the memory they point into and the engine they are in must not be let go (see [`Drop`]).
    pub fn drain(&mut self, vring: &Vring) -> bool {
        let mut failures = 0;
        let mut ctx = self.requests.ctx(self.index);
        while ctx.inflight.count > 0 {
            let Some(engine) = ctx.engine.as_mut() else {
                break;
            };
            if let Err(e) = engine.wait() {
                crate::limited!(
                    error,
                    "queue {}: waiting for in-flight I/O failed: {e}",
                    self.index
                );
                failures += 1;
                if failures == DRAIN_ATTEMPTS {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            // Reaped even after a failed wait: what did complete (an overflowing completion
            // queue's entries, say) is taken, and the next wait may succeed.
            let mut state = vring.get_mut();
            // Each round's completions are timed together.
            ctx.clock = 0;
            let mut pass = Pass::default();
            if Self::reap(&mut ctx, &mut state, false, &mut pass) > 0 {
                Self::notify_guest(&mut state, ctx.mem);
            }
        }
        if self.requests.inflight.count > 0 {
            crate::limited!(
                error,
                "queue {}: {} requests still in flight after {failures} failed waits: their \
                 guest memory and engine are kept",
                self.index,
                self.requests.inflight.count
            );
            return false;
        }
        true
    }

    /// A flag that stops the polling loop as `stop` does: the connection's guest memory broke.
    pub fn stop_also_on(&mut self, flag: Arc<AtomicBool>) {
        self.also_stop = flag;
    }

    /// The flag to set when the driver breaks the ring, for the connection to be closed.
    pub fn report_broken_ring_to(&mut self, flag: Arc<AtomicBool>) {
        self.ring_broken = flag;
    }

    /// The flag that says the frontend logs dirty pages (a live migration is under way).
    pub fn log_dirty_pages_on(&mut self, flag: Arc<AtomicBool>) {
        self.requests.dirty_logging = flag;
    }

    /// Gives the worker an engine created earlier (before confinement); it will open none.
    pub fn lend_engine(&mut self, engine: Option<Box<dyn Engine>>) {
        if self.requests.inflight.count > 0 {
            // The engine in use still holds operations: never dropped (see `Drop`).
            std::mem::forget(self.requests.engine.take());
        }
        self.requests.engine = engine;
        self.engine_memory = 0;
        self.may_open_engine = false;
    }

    /// Takes the engine back once the worker has drained it: an engine with operations still
    /// in flight would complete them into the next connection's requests, so it is dropped.
    pub fn take_engine(&mut self) -> Option<Box<dyn Engine>> {
        if self.requests.inflight.count > 0 {
            // Nor can it be dropped: the kernel may still carry its operations out, into memory
            // that would be unmapped. It stays with this worker, which leaks it (see `Drop`).
            crate::limited!(
                error,
                "queue {}: {} requests never completed; its engine is kept from reuse",
                self.index,
                self.requests.inflight.count
            );
            return None;
        }
        let mut engine = self.requests.engine.take();
        self.engine_memory = 0;
        if let Some(engine) = engine.as_mut() {
            // SAFETY: no regions: the departed guest's memory is let go.
            if let Err(e) = unsafe { engine.guest_memory(&[]) } {
                crate::limited!(
                    warn,
                    "queue {}: unregistering guest memory: {e}",
                    self.index
                );
            }
        }
        engine
    }

    /// The frontend stopped the ring (`GET_VRING_BASE`): whatever the driver broke is gone
    /// with it, and the ring may be served again once started.
    pub fn ring_stopped(&mut self) {
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
        self.broken = None;
        self.checked = None;
        self.recover = self.requests.record.is_some();
    }

    /// Gives the worker its queue's in-flight record (`SET_INFLIGHT_FD`), read when the ring
    /// next starts.
    pub fn set_inflight_record(&mut self, record: Option<InflightRecord>) {
        self.recover = record.is_some();
        self.requests.record = record;
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.requests.inflight.count
    }

    /// Counts time a thread shared with other queues slept.
    pub fn slept(&self, ns: u64) {
        self.requests.stats.slept(ns);
    }

    /// Whether [`Self::set_up`] has run.
    pub fn is_set_up(&self) -> bool {
        self.set_up
    }

    /// How this queue runs.
    pub fn settings(&self) -> QueueSettings {
        self.settings
    }

    /// Makes the worker ready for [`Self::step`]s after a sleep: the current guest memory, the
    /// guest's kicks off.
    pub fn begin_polling(&mut self, vring: &Vring) {
        self.refresh_memory(vring);
        self.suppress_kicks(vring);
    }

    /// One pass for a thread that serves several queues: at most `budget` requests taken.
    pub fn step(&mut self, vring: &Vring, budget: u16) -> Pass {
        self.pass(vring, false, budget)
    }

    /// Turns the guest's kicks on before the serving thread sleeps; true if requests arrived
    /// meanwhile (it must not sleep then).
    pub fn rearm(&mut self, vring: &Vring) -> bool {
        self.rearm_kicks(vring)
    }

    /// The connection's guest memory shrank under it (see [`Self::stop_also_on`]) or the driver
    /// broke this ring: the connection is to be closed.
    pub fn connection_broke(&self) -> bool {
        self.also_stop.load(Ordering::Relaxed) || self.ring_broken.load(Ordering::Relaxed)
    }

    /// Whether the engine wakes a sleeping thread when its operations complete.
    pub fn has_completion_fd(&self) -> bool {
        self.requests
            .engine
            .as_ref()
            .is_some_and(|engine| engine.completion_fd().is_some())
    }

    /// The vring this worker serves, once it has been set up.
    pub fn vring(&self) -> Option<&Vring> {
        self.vring.as_ref()
    }
}

impl super::Drain for QueueWorker {
    fn drain_in_flight(&mut self) -> usize {
        let in_flight = self.in_flight();
        if let Some(vring) = self.vring().cloned() {
            self.drain(&vring);
        }
        in_flight
    }
}

impl Drop for QueueWorker {
    fn drop(&mut self) {
        if self.requests.inflight.count == 0 {
            return;
        }
        // Requests the engine never returned: the kernel may still read or write their guest
        // memory, and dropping an io_uring does not wait for its operations. Both are leaked
        // rather than freed early.
        crate::limited!(
            error,
            "queue {}: {} requests never completed: their engine and guest memory are leaked",
            self.index,
            self.requests.inflight.count
        );
        std::mem::forget(self.requests.engine.take());
        std::mem::forget(Arc::clone(&self.requests.mem));
    }
}
