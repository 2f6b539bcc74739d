//! What every vhost-user device keeps per connection, whatever the device: the checked guest
//! memory, the way to close the connection, and the descriptors the crate's threads poll.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use vhost_user_backend::ShutdownHandle;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};
use vmm_sys_util::event::{
    EventConsumer, EventFlag, EventNotifier, new_event_consumer_and_notifier,
};

use crate::guest::{GuestMemory, memory_faults, memory_table};

pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take this connection down with it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One frontend's connection.
pub(super) struct Connection {
    /// Guest memory as checked by [`memory_table::check`]: the only map the queues see.
    pub guest_memory: GuestMemoryAtomic<GuestMemory>,
    /// Set by the SIGBUS handler when this connection's guest memory shrank under it.
    pub memory_broken: Arc<AtomicBool>,
    /// Set by a queue's worker when the driver broke its ring (an avail index further ahead
    /// than the ring holds): vhost-user has no way to say `DEVICE_NEEDS_RESET`, so the
    /// connection is closed for the frontend to notice and reset the device.
    pub ring_broken: Arc<AtomicBool>,
    /// The owner of this connection's fault guards, one per region that can fault (see
    /// [`memory_faults`]); each region holds its own, for as long as it is mapped.
    fault_owner: Arc<memory_faults::Owner>,
    /// Closes the connection when the frontend sends what cannot be served.
    handle: Mutex<Option<ShutdownHandle>>,
    /// A close asked for before [`Self::connected`] gave the handle (the crate's thread may
    /// handle the first messages before the accepting thread gets there); under `handle`'s lock.
    close_requested: AtomicBool,
    /// The exit eventfds handed to the crate's threads: it registers them by raw descriptor and
    /// never closes them, so they are closed here once those threads are gone.
    exit_fds: Mutex<Vec<OwnedFd>>,
}

impl Connection {
    pub fn new() -> Self {
        let memory_broken = Arc::new(AtomicBool::new(false));
        Connection {
            guest_memory: GuestMemoryAtomic::new(GuestMemory::new()),
            fault_owner: memory_faults::Owner::new(memory_broken.clone()),
            memory_broken,
            ring_broken: Arc::new(AtomicBool::new(false)),
            handle: Mutex::new(None),
            close_requested: AtomicBool::new(false),
            exit_fds: Mutex::new(Vec::new()),
        }
    }

    /// Gives the connection its handle, once the daemon has accepted a frontend.
    pub fn connected(&self, handle: Option<ShutdownHandle>) {
        let mut current = lock(&self.handle);
        *current = handle;
        if self.close_requested.load(Ordering::Acquire)
            && let Some(handle) = current.as_ref()
        {
            handle.shutdown();
        }
    }

    /// Closes the connection now, or as soon as [`Self::connected`] gives its handle.
    pub fn close(&self) {
        let current = lock(&self.handle);
        self.close_requested.store(true, Ordering::Release);
        if let Some(handle) = current.as_ref() {
            handle.shutdown();
        }
    }

    /// Checks a memory table the frontend sent and guards its regions that can fault (sealed
    /// first, then asked); closes the connection if it is refused.
    pub fn check_memory(&self, map: &GuestMemory) -> io::Result<()> {
        let checked =
            memory_table::check(map).and_then(|()| memory_faults::guard(map, &self.fault_owner));
        if let Err(e) = &checked {
            crate::limited!(warn, "memory table refused, closing the connection: {e}");
            self.close();
        }
        checked
    }

    /// Makes a checked map the one the queues see.
    pub fn replace_memory(&self, map: GuestMemory) {
        self.guest_memory
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .replace(map);
    }

    /// The memory the queues see now.
    pub fn memory(&self) -> vm_memory::atomic::GuestMemoryLoadGuard<GuestMemory> {
        self.guest_memory.memory()
    }

    /// An exit eventfd for one of the crate's threads, kept to be closed by
    /// [`Self::close_exit_fds`].
    pub fn exit_event(&self) -> Option<(EventConsumer, EventNotifier)> {
        let (consumer, notifier) =
            new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC).ok()?;
        // SAFETY: `consumer` owns this descriptor; ownership passes to `exit_fds`, and the crate
        // only uses the number (`into_raw_fd`), never closing it (see `close_exit_fds`).
        let owned = unsafe { OwnedFd::from_raw_fd(consumer.as_raw_fd()) };
        lock(&self.exit_fds).push(owned);
        Some((consumer, notifier))
    }

    /// Closes the exit eventfds, once the threads that polled them have ended.
    pub fn close_exit_fds(&self) {
        lock(&self.exit_fds).clear();
    }

    /// Closes the connection if guest memory shrank under `queue` (said here) or a driver broke
    /// a ring (said by its worker); true if it did.
    pub fn close_if_broken(&self, queue: usize) -> bool {
        if self.memory_broken.load(Ordering::Acquire) {
            crate::limited!(
                warn,
                "guest memory shrank under queue {queue} (the frontend truncated its file): \
                 closing the connection"
            );
        } else if !self.ring_broken.load(Ordering::Acquire) {
            return false;
        }
        self.close();
        true
    }
}

/// `size` bytes of a configuration space from `offset` (GET_CONFIG): what lies past its end
/// reads as zeros, and no more than 256 bytes are ever answered.
pub(super) fn config_bytes(config: &[u8], offset: u32, size: u32) -> Vec<u8> {
    let mut out = vec![0u8; size.min(256) as usize];
    let start = (offset as usize).min(config.len());
    let end = start.saturating_add(out.len()).min(config.len());
    out[..end - start].copy_from_slice(&config[start..end]);
    out
}

/// SET_CONFIG: every field vbmq's devices offer is read-only (refused, NACKed with REPLY_ACK).
pub(super) fn refuse_set_config(offset: u32, buf: &[u8]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("SET_CONFIG of {} bytes at {offset}: read-only", buf.len()),
    ))
}
