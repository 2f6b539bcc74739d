//! One virtqueue's worker, whatever the device. It runs on the vhost-user-backend epoll thread
//! dedicated to this queue, pinned to the queue's CPU, or on that CPU's shared thread
//! ([`cpu_poller`](super::cpu_poller)); in `poll` and `adaptive` modes it keeps its thread
//! spinning on the avail ring and the completions instead of returning to epoll. The device's
//! [`QueueHandler`] starts and completes the requests.

use std::hint::spin_loop;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::guest::{GuestMemory, Vring};
use vhost_user_backend::{VringState, VringT};
use virtio_queue::{Queue, QueueT};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};

use super::WaitMode;
use super::affinity::{name_current_thread, pin_current_thread};
use super::handler::QueueHandler;
use super::ring_setup::{RingSetup, stop_outside_memory};
use super::stats::QueueStats;
use crate::backend::EngineOptions;
use crate::timer::{Timer, now_ns};

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
    /// A queue in `mode` on no particular CPU, batched, with rings of up to `max_size`: the
    /// workers of tests, benchmarks and fuzz targets.
    pub fn unpinned(mode: WaitMode, max_size: u16) -> Self {
        QueueSettings {
            mode,
            poll: Duration::ZERO,
            cpu: None,
            batch: true,
            max_size,
        }
    }

    /// What this queue asks of its engine.
    pub fn engine_options(&self) -> EngineOptions {
        EngineOptions {
            depth: u32::from(self.max_size) * 2,
            batch: self.batch,
            notify: self.mode != WaitMode::Poll,
        }
    }

    /// Whether a CPU's shared thread serves the queue: one pinned to a CPU that polls.
    pub fn shared_cpu(&self) -> Option<usize> {
        self.cpu.filter(|_| self.mode != WaitMode::Event)
    }
}

/// What one pass over the queue found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pass {
    /// The ring is started, enabled and not broken.
    pub ready: bool,
    /// Requests taken off the ring.
    pub started: usize,
    /// Completions reaped.
    pub completed: usize,
    /// The device's limits held requests back in the ring.
    pub limited: bool,
}

/// The state a queue's thread owns: its ring checks, its guest-memory snapshot and the
/// device's handler `H`.
pub struct QueueWorker<H: QueueHandler> {
    index: usize,
    settings: QueueSettings,
    atomic_mem: GuestMemoryAtomic<GuestMemory>,
    /// The guest memory every in-flight request points into: replaced only once they completed.
    mem: Arc<GuestMemory>,
    stats: Arc<QueueStats>,
    /// The device's side: what starting and completing a request takes.
    handler: H,
    /// Ends the polling loop like `stop` (see [`Self::stop_also_on`]).
    also_stop: Arc<AtomicBool>,
    /// Set when the driver broke the ring: the connection is to be closed (see
    /// [`Self::report_broken_ring_to`]).
    ring_broken: Arc<AtomicBool>,
    vring: Option<Vring>,
    set_up: bool,
    /// The ring set-up the driver or frontend broke (an avail index further ahead than the ring
    /// holds, or a ring not wholly inside guest memory): not served until the frontend sets the
    /// ring up again (virtio's NEEDS_RESET).
    broken: Option<RingSetup>,
    /// The ring placement last found wholly inside guest memory (checked again when the ring
    /// or the memory map changes, not on every pass).
    checked: Option<RingSetup>,
    /// Armed when the device's limits hold requests back: it wakes a sleeping thread.
    limit_timer: Option<Timer>,
    /// The last pass was held back by the limits: sleep, the timer wakes the thread.
    limited: bool,
    /// When this queue's own thread went back to sleep (`now_ns`; 0: it is awake).
    asleep_since: u64,
}

impl<H: QueueHandler> QueueWorker<H> {
    /// A worker for queue `index` around the device's `handler`; the handler readies itself on
    /// the serving thread, in [`Self::set_up`].
    pub fn new(
        index: usize,
        settings: QueueSettings,
        handler: H,
        atomic_mem: GuestMemoryAtomic<GuestMemory>,
        stats: Arc<QueueStats>,
    ) -> Self {
        let mem = atomic_mem.memory().into_inner();
        QueueWorker {
            index,
            settings,
            atomic_mem,
            mem,
            stats,
            handler,
            also_stop: Arc::new(AtomicBool::new(false)),
            ring_broken: Arc::new(AtomicBool::new(false)),
            vring: None,
            set_up: false,
            broken: None,
            checked: None,
            limit_timer: H::LIMITED
                .then(|| {
                    Timer::new()
                        .map_err(|e| {
                            crate::limited!(warn, "queue {index}: no timer for I/O limits: {e}");
                        })
                        .ok()
                })
                .flatten(),
            limited: false,
            asleep_since: 0,
        }
    }

    /// The device's handler.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The device's handler, to change.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Prepares the worker: readies its handler and, on a thread of its own (`own_thread`),
    /// names that thread and pins it. Returns the handler's completion descriptor the first
    /// time, for the caller to wait on.
    pub fn set_up(&mut self, vring: &Vring, own_thread: bool) -> Option<RawFd> {
        if self.set_up {
            return None;
        }
        self.set_up = true;
        self.vring = Some(vring.clone());
        if own_thread {
            name_current_thread(&format!("{}{}", H::THREAD_NAME, self.index));
            if let Some(cpu) = self.settings.cpu
                && let Err(e) = pin_current_thread(cpu)
            {
                crate::limited!(warn, "queue {}: cannot pin to CPU {cpu}: {e}", self.index);
            }
        }
        self.handler.set_up(own_thread)
    }

    /// Serves the queue after a kick, a completion or the ring being enabled, in the queue's
    /// mode. Returns when the thread should sleep in epoll again, or when `stop` is set.
    pub fn run(&mut self, vring: &Vring, stop: &AtomicBool) {
        if self.asleep_since != 0 {
            self.stats.slept(now_ns().saturating_sub(self.asleep_since));
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
            if !pass.ready && self.handler.in_flight() == 0 {
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
        if let Err(e) = state.get_queue_mut().disable_notification(&*self.mem) {
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
        if !queue.enable_notification(&*self.mem).unwrap_or(false) || self.limited {
            return false;
        }
        // Entries an avail index past the ring claims cannot be taken: sleep all the same.
        queue
            .avail_idx(&*self.mem, Ordering::Acquire)
            .is_ok_and(|avail| avail.0.wrapping_sub(queue.next_avail()) <= queue.size())
    }

    /// Switches to the current guest memory once nothing in flight points into the old one.
    /// Returns false if requests are still in flight: the old memory is kept, mapped, for them.
    fn refresh_memory(&mut self, vring: &Vring) -> bool {
        let current = self.atomic_mem.memory();
        if std::ptr::eq(&*current, &*self.mem) {
            return true;
        }
        drop(current);
        if !self.drain(vring) {
            return false;
        }
        let old = std::mem::replace(&mut self.mem, self.atomic_mem.memory().into_inner());
        // The handler (its engine) lets go of the old mappings before they can be unmapped.
        self.handler.use_memory(&self.mem);
        drop(old);
        true
    }

    /// One pass: take the available requests (at most `budget`), submit them together, complete
    /// what is done, and notify the guest once. `rearm` keeps kicks enabled (event mode).
    fn pass(&mut self, vring: &Vring, rearm: bool, budget: u16) -> Pass {
        self.handler.use_memory(&self.mem);
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
        let mem: &GuestMemory = &self.mem;
        let handler = &mut self.handler;
        let setup = RingSetup::of(state.get_queue(), mem);
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
        if pass.ready && handler.recovery_pending() {
            // What a process before this one left in flight goes first, read through the
            // current memory map.
            if !std::ptr::eq(&*atomic_mem.memory(), mem) {
                return (pass, true);
            }
            let (started, added) = handler.recover(state.get_queue_mut(), mem);
            pass.started += started;
            used += added;
        }
        if pass.ready {
            let queue = state.get_queue_mut();
            loop {
                if rearm && queue.disable_notification(mem).is_err() {
                    // The ring is not in this snapshot: the frontend may have sent its memory
                    // table since (the first request of a VM's BIOS comes right after).
                    stale = !std::ptr::eq(&*atomic_mem.memory(), mem);
                    if !stale && !setup.fits(mem) {
                        stop_outside_memory(self.index, &mut self.broken, setup);
                        pass.ready = false;
                    }
                    break;
                }
                let avail = queue.avail_idx(mem, Ordering::Acquire);
                let mut waiting = avail
                    .as_ref()
                    .map_or(0, |idx| idx.0.wrapping_sub(queue.next_avail()));
                if waiting > queue.size() {
                    // No driver can make more entries available than the ring holds. Stop at
                    // once, say so once, and have the connection closed: the frontend then
                    // resets the device (a stopped queue alone would stall the guest silently).
                    stop_avail_past_ring(self.index, queue, waiting);
                    self.ring_broken.store(true, Ordering::Release);
                    self.broken = Some(setup);
                    pass.ready = false;
                    break;
                }
                // Only when there is work (or the ring is not mapped at all) is the snapshot
                // compared with the current map: an idle poll stays cheap.
                if (waiting > 0 || avail.is_err()) && !std::ptr::eq(&*atomic_mem.memory(), mem) {
                    stale = true;
                    break;
                }
                // The memory table may have changed since SET_VRING_ADDR checked the ring.
                if (waiting > 0 || avail.is_err()) && self.checked != Some(setup.placement()) {
                    if avail.is_ok() && setup.fits(mem) {
                        self.checked = Some(setup.placement());
                    } else {
                        stop_outside_memory(self.index, &mut self.broken, setup);
                        pass.ready = false;
                        break;
                    }
                }
                let offered = waiting;
                waiting = waiting.min(budget);
                used += start_requests(handler, queue, mem, limit_timer, &mut waiting, &mut pass);
                if pass.limited || !rearm || !queue.enable_notification(mem).unwrap_or(false) {
                    break;
                }
                // Go round again for requests that arrived meanwhile, never for entries that
                // cannot be taken (an avail index past the ring): that would spin forever.
                if offered > 0 && (waiting == offered || offered > budget) {
                    break;
                }
            }
        }
        let (completed, added) = handler.complete(state.get_queue_mut(), mem, true);
        pass.completed += completed;
        used += added;
        if used > 0 {
            notify_guest(&mut state, mem);
        }
        self.limited = pass.limited;
        self.stats
            .pass(pass.started + pass.completed > 0, handler.in_flight());
        (pass, stale)
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
        if let Some(fd) = self.handler.completion_fd() {
            let mut value = 0u64;
            // SAFETY: reads 8 bytes into a u64 from an eventfd the handler owns.
            let _ = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
        }
    }

    /// Completes every request in flight, blocking until the handler returns them all. Returns
    /// false if it keeps failing to wait for them: they are still in flight then, and the
    /// memory they point into (and the engine they are in) must not be let go (see [`Drop`]).
    pub fn drain(&mut self, vring: &Vring) -> bool {
        let mut failures = 0;
        while self.handler.in_flight() > 0 {
            let Some(waited) = self.handler.wait() else {
                break;
            };
            if let Err(e) = waited {
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
            let (_, used) = self
                .handler
                .complete(state.get_queue_mut(), &self.mem, false);
            if used > 0 {
                notify_guest(&mut state, &self.mem);
            }
        }
        if self.handler.in_flight() > 0 {
            crate::limited!(
                error,
                "queue {}: {} requests still in flight after {failures} failed waits: their \
                 guest memory and engine are kept",
                self.index,
                self.handler.in_flight()
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

    /// The frontend stopped the ring (`GET_VRING_BASE`): whatever the driver broke is gone
    /// with it, and the ring may be served again once started.
    pub fn ring_stopped(&mut self) {
        self.handler.ring_stopped();
        self.broken = None;
        self.checked = None;
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.handler.in_flight()
    }

    /// Whether [`Self::set_up`] has run.
    pub fn is_set_up(&self) -> bool {
        self.set_up
    }

    /// The vring this worker serves, once it has been set up.
    pub fn vring(&self) -> Option<&Vring> {
        self.vring.as_ref()
    }

    /// The queue's index.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Takes up to `waiting` requests off the ring and starts them, unless the device's limits hold
/// them back. Counts down `waiting` and `pass.started`; returns the used entries added.
fn start_requests<H: QueueHandler>(
    handler: &mut H,
    queue: &mut Queue,
    mem: &GuestMemory,
    limit_timer: Option<&Timer>,
    waiting: &mut u16,
    pass: &mut Pass,
) -> usize {
    let mut used = 0;
    while *waiting > 0 {
        let wait = handler.hold_back();
        if !wait.is_zero() {
            // Left in the ring; the timer wakes the thread when they may go.
            if let Some(timer) = limit_timer {
                timer.arm(wait);
            }
            pass.limited = true;
            break;
        }
        let Some(chain) = queue.pop_descriptor_chain(mem) else {
            break;
        };
        *waiting -= 1;
        pass.started += 1;
        used += handler.start(queue, mem, chain);
    }
    used
}

/// Says once that the avail index runs `waiting` entries ahead of a ring that holds fewer.
fn stop_avail_past_ring(index: usize, queue: &Queue, waiting: u16) {
    crate::limited!(
        warn,
        "queue {index}: avail index {} is {waiting} entries ahead of a {}-entry ring; \
         queue stopped, closing the connection for the frontend to reset it",
        queue.next_avail().wrapping_add(waiting),
        queue.size()
    );
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

/// A queue as a thread that serves several queues of any device sees it (a CPU's thread, see
/// [`cpu_poller`](super::cpu_poller)): one virtual call per pass, none per request.
pub trait ServedQueue: Send {
    /// How this queue runs.
    fn settings(&self) -> QueueSettings;
    /// Makes the worker ready for [`Self::step`]s after a sleep: the current guest memory, the
    /// guest's kicks off.
    fn begin_polling(&mut self, vring: &Vring);
    /// One pass: at most `budget` requests taken.
    fn step(&mut self, vring: &Vring, budget: u16) -> Pass;
    /// Turns the guest's kicks on before the serving thread sleeps; true if requests arrived
    /// meanwhile (it must not sleep then).
    fn rearm(&mut self, vring: &Vring) -> bool;
    /// Counts time the shared thread slept.
    fn slept(&self, ns: u64);
    /// Clears the completion eventfd (and the limit timer) after it woke the thread.
    fn clear_completion_event(&self);
    /// The connection's guest memory shrank under it (see [`QueueWorker::stop_also_on`]) or
    /// the driver broke this ring: the connection is to be closed.
    fn connection_broke(&self) -> bool;
    /// Requests in flight.
    fn in_flight(&self) -> usize;
    /// Whether completions wake a sleeping thread.
    fn has_completion_fd(&self) -> bool;
}

impl<H: QueueHandler> ServedQueue for QueueWorker<H> {
    fn settings(&self) -> QueueSettings {
        self.settings
    }

    fn begin_polling(&mut self, vring: &Vring) {
        self.refresh_memory(vring);
        self.suppress_kicks(vring);
    }

    fn step(&mut self, vring: &Vring, budget: u16) -> Pass {
        self.pass(vring, false, budget)
    }

    fn rearm(&mut self, vring: &Vring) -> bool {
        self.rearm_kicks(vring)
    }

    fn slept(&self, ns: u64) {
        self.stats.slept(ns);
    }

    fn clear_completion_event(&self) {
        QueueWorker::clear_completion_event(self);
    }

    fn connection_broke(&self) -> bool {
        self.also_stop.load(Ordering::Relaxed) || self.ring_broken.load(Ordering::Relaxed)
    }

    fn in_flight(&self) -> usize {
        self.handler.in_flight()
    }

    fn has_completion_fd(&self) -> bool {
        self.handler.completion_fd().is_some()
    }
}

impl<H: QueueHandler> super::Drain for QueueWorker<H> {
    fn drain_in_flight(&mut self) -> usize {
        let in_flight = self.in_flight();
        if let Some(vring) = self.vring().cloned() {
            self.drain(&vring);
        }
        in_flight
    }
}

impl<H: QueueHandler> Drop for QueueWorker<H> {
    fn drop(&mut self) {
        if self.handler.in_flight() == 0 {
            return;
        }
        // Requests the handler never returned: the kernel may still read or write their guest
        // memory (dropping an io_uring does not wait for its operations), so the memory is
        // leaked rather than freed early; the handler leaks its engine likewise.
        crate::limited!(
            error,
            "queue {}: {} requests never completed: their engine and guest memory are leaked",
            self.index,
            self.handler.in_flight()
        );
        std::mem::forget(Arc::clone(&self.mem));
    }
}
