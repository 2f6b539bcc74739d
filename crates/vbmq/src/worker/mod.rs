//! The per-queue I/O thread: it owns its queue's engine, in-flight table and buffers, pulls
//! requests off the avail ring, submits them in one batch, and completes them on its own CPU.

mod affinity;
pub mod cpu_poller;
mod fs_queue_worker;
mod inflight;
mod queue_worker;
mod recovery;
mod requests;
mod ring_setup;
mod stats;
mod stop_flag;
mod wait_mode;

pub use affinity::{name_current_thread, online_cpus, pin_current_thread};
pub use fs_queue_worker::FsQueueWorker;
// The limits live beside the worker (the device holds their buckets); named here too.
pub use crate::limits::{DiskLimiter, Limits};
pub use queue_worker::{Pass, QueueSettings, QueueWorker};
pub use stats::{LATENCY_BUCKETS, OpKind, QueueStats};
pub use stop_flag::{Drain, Drained, StopFlag, StopHold};
pub use wait_mode::WaitMode;

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod tests;

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod short_transfer_tests;
