//! The device-neutral queue core: a queue's worker pulls requests off the avail ring, has the
//! device's [`QueueHandler`] start them (one batch per pass), completes them and notifies the
//! guest once per pass, on its own CPU; it waits by polling, on events or adaptively, on a
//! thread of its own or on its CPU's shared thread ([`cpu_poller`]). The devices' request
//! handling lives with the devices (`virtio_blk::queue`, `virtio_fs::queue`).

mod affinity;
pub mod cpu_poller;
mod handler;
mod queue_worker;
mod ring_setup;
mod stats;
mod stop_flag;
mod wait_mode;

pub use affinity::{name_current_thread, online_cpus, pin_current_thread};
pub use handler::QueueHandler;
// The limits live beside the worker (the device holds their buckets); named here too.
pub use crate::limits::{DiskLimiter, Limits};
pub use queue_worker::{Pass, QueueSettings, QueueWorker, ServedQueue};
pub use stats::{LATENCY_BUCKETS, OpKind, QueueStats};
pub use stop_flag::{Drain, Drained, StopFlag, StopHold};
pub use wait_mode::WaitMode;
