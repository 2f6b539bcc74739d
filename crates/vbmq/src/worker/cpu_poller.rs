//! One I/O thread per CPU, for the whole process (seed 001's I/O-dedicated thread, SPDK's
//! reactor): every polling or adaptive queue pinned to a CPU, of any disk and any connection, is
//! served by that CPU's thread. The unit of work is still a queue, with its own ring, engine and
//! in-flight table and no lock shared with any other queue; the worker is now a CPU.
//!
//! The thread takes at most [`BUDGET`] requests from each ring in turn, so a busy guest cannot
//! starve a quiet one. It spins while any of its queues is in `mode=poll`, or an adaptive one was
//! busy within its `poll-us`; otherwise it re-arms every ring's kicks, looks once more, and sleeps
//! on one epoll of their kicks, their completion eventfds and its doorbell.

use crate::guest::Vring;
use std::collections::HashMap;
use std::hint::spin_loop;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::WaitMode;
use super::affinity::{name_current_thread, pin_current_thread};
use super::queue_worker::ServedQueue;
use super::stop_flag::StopFlag;
use crate::timer::now_ns;

/// Requests taken from one ring before the thread turns to the next.
pub const BUDGET: u16 = 32;

/// One queue as its serving thread and the control thread share it: a worker `W` of any
/// device (a CPU's thread holds them as [`ServedQueue`]s).
#[repr(align(128))]
pub struct QueueCell<W: ?Sized = dyn ServedQueue> {
    /// Asks the serving thread to leave the queue alone (to stop or drain it).
    pub stop: StopFlag,
    /// The kick eventfd last added to the CPU thread's epoll (-1: none).
    watched_kick: AtomicI32,
    /// Written by the CPU thread when the queue's guest memory broke, for the connection's
    /// thread to close it.
    pub notice: Notice,
    /// The queue's state, held by whichever thread serves or stops it (last: it may be
    /// unsized).
    pub worker: Mutex<W>,
}

/// An eventfd the CPU thread writes to reach a connection's thread (`-1` if none could be made:
/// the connection then is not told).
pub struct Notice(Option<EventFd>);

impl Notice {
    fn new() -> Self {
        Notice(EventFd::new(EFD_NONBLOCK).ok())
    }

    /// Wakes the connection's thread.
    pub fn write(&self) {
        if let Some(fd) = &self.0 {
            let _ = fd.write(1);
        }
    }

    /// Clears it once read.
    pub fn read(&self) {
        if let Some(fd) = &self.0 {
            let _ = fd.read();
        }
    }

    /// The descriptor to wait on.
    pub fn as_raw_fd(&self) -> RawFd {
        self.0.as_ref().map_or(-1, |fd| fd.as_raw_fd())
    }
}

impl<W> QueueCell<W> {
    /// A queue around its worker.
    pub fn new(worker: W) -> Self {
        QueueCell {
            stop: StopFlag::new(),
            watched_kick: AtomicI32::new(-1),
            notice: Notice::new(),
            worker: Mutex::new(worker),
        }
    }
}

impl<W: ?Sized> QueueCell<W> {
    /// The worker, whatever a panic elsewhere left behind.
    pub fn lock(&self) -> MutexGuard<'_, W> {
        self.worker.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The thread of one CPU and the queues it serves.
pub struct CpuPoller {
    cpu: usize,
    epoll: OwnedFd,
    doorbell: EventFd,
    queues: Mutex<Vec<(Arc<QueueCell>, Vring)>>,
    /// Bumped when `queues` changes; the thread reloads its list when it sees a new value.
    generation: AtomicU64,
    /// The thread is about to sleep or asleep: wakers must ring the doorbell.
    sleeping: AtomicBool,
}

/// The poller of `cpu`, started on first use.
pub fn poller_of(cpu: usize) -> io::Result<Arc<CpuPoller>> {
    static POLLERS: OnceLock<Mutex<HashMap<usize, Arc<CpuPoller>>>> = OnceLock::new();
    let mut pollers = POLLERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(poller) = pollers.get(&cpu) {
        return Ok(poller.clone());
    }
    // SAFETY: epoll_create1 returns a new descriptor, owned at once.
    let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epoll < 0 {
        return Err(io::Error::last_os_error());
    }
    let poller = Arc::new(CpuPoller {
        cpu,
        // SAFETY: `epoll` was just created and nothing else owns it.
        epoll: unsafe { OwnedFd::from_raw_fd(epoll) },
        doorbell: EventFd::new(EFD_NONBLOCK)?,
        queues: Mutex::new(Vec::new()),
        generation: AtomicU64::new(0),
        sleeping: AtomicBool::new(false),
    });
    poller.watch(poller.doorbell.as_raw_fd(), false)?;
    let thread = poller.clone();
    std::thread::Builder::new()
        .name(format!("vbmq-cpu{cpu}"))
        .spawn(move || thread.run())?;
    pollers.insert(cpu, poller.clone());
    Ok(poller)
}

/// One queue as the thread sees it between two reloads of its list.
struct Entry {
    cell: Arc<QueueCell>,
    vring: Vring,
    mode: WaitMode,
    poll: Duration,
}

/// What the thread keeps of a queue across passes.
#[derive(Default)]
struct QueueState {
    /// Since when an adaptive queue has found no work.
    idle_since: Option<Instant>,
    /// The memory broke and the connection was told: left alone from now on.
    noticed: bool,
}

/// What a pass over the queues found.
enum Serve {
    /// Requests were taken or completed: go round again at once.
    Worked,
    /// Nothing, but some queue is to be polled: go round again after a pause.
    Spin,
    /// Every queue may sleep.
    Idle,
    /// The control thread wants a queue, or the list changed: let go of the queues.
    Yield,
}

/// Passes made while holding the queues before the thread lets go of them to take them again
/// (a queue it could not take at the start of a burst is tried again then).
const BURST: u32 = 4096;

fn try_lock(cell: &QueueCell) -> Option<MutexGuard<'_, dyn ServedQueue + 'static>> {
    match cell.worker.try_lock() {
        Ok(worker) => Some(worker),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl CpuPoller {
    /// Adds `fd` to the thread's epoll: edge-triggered for kicks (the connection's thread
    /// consumes them), level-triggered otherwise. Adding one already there is not an error.
    pub fn watch(&self, fd: RawFd, edge: bool) -> io::Result<()> {
        let events = libc::EPOLLIN.cast_unsigned()
            | if edge {
                libc::EPOLLET.cast_unsigned()
            } else {
                0
            };
        let mut event = libc::epoll_event { events, u64: 0 };
        // SAFETY: adds an open descriptor to an epoll instance this poller owns.
        let r =
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) };
        let err = io::Error::last_os_error();
        if r < 0 && err.raw_os_error() != Some(libc::EEXIST) {
            return Err(err);
        }
        Ok(())
    }

    /// Watches the ring's current kick eventfd, if it is not watched already.
    pub fn watch_kick<W: ?Sized>(&self, cell: &QueueCell<W>, vring: &Vring) {
        use vhost_user_backend::VringT;
        let Some(fd) = vring
            .get_ref()
            .get_kick()
            .as_ref()
            .map(|kick| kick.as_raw_fd())
        else {
            return;
        };
        if cell.watched_kick.swap(fd, Ordering::AcqRel) != fd
            && let Err(e) = self.watch(fd, true)
        {
            crate::limited!(warn, "CPU {}: cannot watch a kick: {e}", self.cpu);
        }
    }

    /// Serves `cell` from now on.
    pub fn add(&self, cell: Arc<QueueCell>, vring: Vring) {
        self.lock_queues().push((cell, vring));
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.wake();
    }

    /// Serves `cell` no more (once the thread has reloaded its list, which it does before its
    /// next pass over the queues or right after a sleep).
    pub fn remove<W: ?Sized>(&self, cell: &QueueCell<W>) {
        let address = std::ptr::from_ref(cell).cast::<u8>();
        self.lock_queues()
            .retain(|(c, _)| !std::ptr::eq(Arc::as_ptr(c).cast::<u8>(), address));
        cell.watched_kick.store(-1, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.wake();
    }

    /// Wakes the thread if it sleeps (a kick the connection's thread consumed first).
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            let _ = self.doorbell.write(1);
        }
    }

    fn lock_queues(&self) -> MutexGuard<'_, Vec<(Arc<QueueCell>, Vring)>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn load(&self) -> Vec<Entry> {
        self.lock_queues()
            .iter()
            .map(|(cell, vring)| {
                let settings = cell.lock().settings();
                Entry {
                    cell: cell.clone(),
                    vring: vring.clone(),
                    mode: settings.mode,
                    poll: settings.poll,
                }
            })
            .collect()
    }

    fn run(self: Arc<Self>) {
        name_current_thread(&format!("vbmq-cpu{}", self.cpu));
        if let Err(e) = pin_current_thread(self.cpu) {
            crate::limited!(warn, "cannot pin the thread of CPU {}: {e}", self.cpu);
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut states: Vec<QueueState> = Vec::new();
        let mut seen = u64::MAX;
        loop {
            let generation = self.generation.load(Ordering::Acquire);
            if generation != seen {
                seen = generation;
                entries = self.load();
                states = entries.iter().map(|_| QueueState::default()).collect();
                self.waking(&entries, &mut states, 0);
            }
            if !self.burst(&entries, &mut states, seen) {
                continue;
            }
            // Everything is idle: re-arm every ring's kicks, look once more, then sleep.
            self.sleeping.store(true, Ordering::SeqCst);
            let arrived = entries.iter().any(|entry| {
                !entry.cell.stop.is_set()
                    && try_lock(&entry.cell).is_none_or(|mut worker| worker.rearm(&entry.vring))
            });
            let mut slept = 0;
            if !arrived && self.generation.load(Ordering::Acquire) == seen {
                let since = now_ns();
                self.sleep();
                slept = now_ns().saturating_sub(since);
            }
            self.sleeping.store(false, Ordering::SeqCst);
            self.waking(&entries, &mut states, slept);
        }
    }

    /// Serves the queues, holding them, until all are idle (true) or something else needs them
    /// (false): the control thread (a stop flag), a new list, or a queue not taken at the start.
    fn burst(&self, entries: &[Entry], states: &mut [QueueState], seen: u64) -> bool {
        let mut workers: Vec<Option<MutexGuard<'_, dyn ServedQueue + 'static>>> = entries
            .iter()
            .map(|entry| {
                if entry.cell.stop.is_set() {
                    None
                } else {
                    try_lock(&entry.cell)
                }
            })
            .collect();
        let all_taken = workers.iter().all(Option::is_some);
        for round in 0.. {
            match serve(entries, states, &mut workers) {
                Serve::Worked => {}
                Serve::Spin => spin_loop(),
                Serve::Idle => return all_taken,
                Serve::Yield => return false,
            }
            if self.generation.load(Ordering::Relaxed) != seen || (!all_taken && round > BURST) {
                return false;
            }
        }
        false
    }

    /// After a sleep of `slept` ns (or a new list): kicks off again, completion eventfds
    /// cleared, the sleep counted for every queue.
    fn waking(&self, entries: &[Entry], states: &mut [QueueState], slept: u64) {
        for (entry, state) in entries.iter().zip(states.iter_mut()) {
            state.idle_since = None;
            if entry.cell.stop.is_set() {
                continue;
            }
            if let Some(mut worker) = try_lock(&entry.cell) {
                worker.slept(slept);
                worker.clear_completion_event();
                worker.begin_polling(&entry.vring);
            }
        }
    }

    fn sleep(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 8];
        // SAFETY: waits on an epoll instance this poller owns, into a local buffer.
        let _ = unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), 8, -1) };
        let _ = self.doorbell.read();
    }
}

/// One pass over every queue the thread holds.
fn serve(
    entries: &[Entry],
    states: &mut [QueueState],
    workers: &mut [Option<MutexGuard<'_, dyn ServedQueue + 'static>>],
) -> Serve {
    let mut spin = false;
    let mut worked = false;
    for ((entry, state), slot) in entries
        .iter()
        .zip(states.iter_mut())
        .zip(workers.iter_mut())
    {
        let Some(worker) = slot.as_mut() else {
            continue;
        };
        if entry.cell.stop.is_set() {
            // The control thread waits for this queue: let go of it now.
            *slot = None;
            return Serve::Yield;
        }
        if state.noticed {
            continue;
        }
        let pass = worker.step(&entry.vring, BUDGET);
        if worker.connection_broke() {
            // The connection's thread closes it; this queue is left alone until then.
            state.noticed = true;
            entry.cell.notice.write();
            continue;
        }
        if pass.started + pass.completed > 0 {
            state.idle_since = None;
            worked = true;
            continue;
        }
        if !pass.ready && worker.in_flight() == 0 {
            continue;
        }
        spin |= match entry.mode {
            WaitMode::Poll => true,
            WaitMode::Adaptive => {
                let since = *state.idle_since.get_or_insert_with(Instant::now);
                since.elapsed() < entry.poll
            }
            // A worker whose engine has no completion eventfd must be polled for them.
            WaitMode::Event => worker.in_flight() > 0 && !worker.has_completion_fd(),
        };
    }
    if worked {
        Serve::Worked
    } else if spin {
        Serve::Spin
    } else {
        Serve::Idle
    }
}
