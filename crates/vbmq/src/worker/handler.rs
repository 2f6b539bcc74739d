//! What a device plugs into the queue core: how to start one descriptor chain and how to
//! complete what it started. The core ([`QueueWorker`](super::QueueWorker)) owns the ring, the
//! waiting, the memory snapshot and the guest notification; the handler owns everything a
//! request needs (an engine, an in-flight table, a copy buffer) and is called without any
//! virtual dispatch (the worker is generic over it).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use virtio_queue::{DescriptorChain, Queue};

use crate::guest::GuestMemory;

/// A device's side of one queue.
pub trait QueueHandler: Send {
    /// The name of a thread of its own, before the queue's index (`vbmq-q`).
    const THREAD_NAME: &'static str;

    /// Readies the handler on the thread that will serve the queue (`own_thread`: one of its
    /// own, named and pinned already; otherwise the thread that hands it to a CPU's thread).
    /// Returns the descriptor that wakes a sleeping thread when requests complete.
    fn set_up(&mut self, own_thread: bool) -> Option<RawFd>;

    /// The memory snapshot the pass's requests will point into, at the start of every pass and
    /// right after the snapshot is replaced (only ever with nothing in flight).
    fn use_memory(&mut self, mem: &GuestMemory);

    /// Whether the device has limits ([`Self::hold_back`]): the worker then keeps a timer to wake
    /// its thread when held-back requests may go.
    const LIMITED: bool = false;

    /// How long the next request must wait in the ring (the device's limits); zero: it may go.
    fn hold_back(&self) -> Duration {
        Duration::ZERO
    }

    /// Requests a process before this one left in flight wait to be taken again, before any
    /// new one.
    fn recovery_pending(&self) -> bool {
        false
    }

    /// Takes them again; returns the requests started and the used entries added.
    fn recover(&mut self, _queue: &mut Queue, _mem: &GuestMemory) -> (usize, usize) {
        (0, 0)
    }

    /// Starts one chain taken off the ring (or completes it at once); returns the used entries
    /// added.
    fn start(
        &mut self,
        queue: &mut Queue,
        mem: &GuestMemory,
        chain: DescriptorChain<&GuestMemory>,
    ) -> usize;

    /// Submits what was started (`submit`) and completes what is done into the used ring;
    /// returns the completions reaped and the used entries added.
    fn complete(&mut self, queue: &mut Queue, mem: &GuestMemory, submit: bool) -> (usize, usize);

    /// Requests started and not yet completed.
    fn in_flight(&self) -> usize;

    /// Blocks until some request in flight completes; `None` if nothing can complete them (no
    /// engine).
    fn wait(&mut self) -> Option<io::Result<()>>;

    /// The descriptor completions wake a sleeping thread with (see [`Self::set_up`]).
    fn completion_fd(&self) -> Option<RawFd>;

    /// The frontend stopped the ring (`GET_VRING_BASE`), with nothing in flight.
    fn ring_stopped(&mut self) {}
}
