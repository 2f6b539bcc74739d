//! A virtio-fs queue's side of the queue core ([`QueueHandler`]). A FUSE request is served
//! where it is taken: its header and arguments are copied once into the handler's buffer
//! (`RequestCopy`, allocated with the handler), the passthrough reads and writes data straight
//! between the host file and the guest's buffers (`preadv`/`pwritev` on the page cache, the
//! fastest host path for cached files). The used entries of a pass are published together, with
//! one update of the used index (whose cache line a polling driver keeps reading), and the core
//! sends one notification for them. Nothing is ever in flight between passes.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::GuestMemoryAtomic;

use super::{FsDevice, RequestCopy, thread_umask};
use crate::guest::GuestMemory;
use crate::worker::{QueueHandler, QueueSettings, QueueStats, QueueWorker};

/// A virtio-fs queue's worker.
pub type FsQueueWorker = QueueWorker<FsQueue>;

/// What a virtio-fs queue's thread owns beside the ring.
pub struct FsQueue {
    index: usize,
    device: Arc<FsDevice>,
    /// The request being served, copied out of guest memory (see `RequestCopy`).
    copy: RequestCopy,
    stats: Arc<QueueStats>,
    /// Requests served since the counters were last told.
    served: u64,
    /// This pass's used entries (head, bytes written), published by [`QueueHandler::complete`];
    /// room for a ring's worth is taken once.
    finished: Vec<(u16, u32)>,
}

impl FsQueue {
    /// A worker for queue `index` (0 is the high-priority queue).
    pub fn worker(
        index: usize,
        settings: QueueSettings,
        device: Arc<FsDevice>,
        atomic_mem: GuestMemoryAtomic<GuestMemory>,
        stats: Arc<QueueStats>,
    ) -> FsQueueWorker {
        let handler = FsQueue {
            index,
            device,
            copy: RequestCopy::default(),
            stats: stats.clone(),
            served: 0,
            finished: Vec::with_capacity(usize::from(settings.max_size)),
        };
        QueueWorker::new(index, settings, handler, atomic_mem, stats)
    }
}

impl QueueHandler for FsQueue {
    const THREAD_NAME: &'static str = "vbmq-fs-q";

    fn set_up(&mut self, _own_thread: bool) -> Option<RawFd> {
        // The serving thread's umask is cleared when it serves its first request (a CPU's
        // thread serves requests, not the thread that sets the queue up).
        None
    }

    fn use_memory(&mut self, _mem: &GuestMemory) {}

    #[inline]
    fn start(
        &mut self,
        _queue: &mut Queue,
        mem: &GuestMemory,
        chain: DescriptorChain<&GuestMemory>,
    ) -> usize {
        if let Err(e) = thread_umask::clear_once_for_this_thread() {
            crate::limited!(
                warn,
                "fs queue {}: the process umask applies to files guests create: {e}",
                self.index
            );
        }
        let head = chain.head_index();
        let written = self.device.handle(mem, chain, &mut self.copy);
        self.served += 1;
        self.finished.push((head, written));
        // Published at the end of the pass (`complete`), all together.
        0
    }

    fn complete(&mut self, queue: &mut Queue, mem: &GuestMemory, _submit: bool) -> (usize, usize) {
        // Each request was served as it was taken; its used entry and the counters are told
        // once a pass.
        if self.served > 0 {
            self.stats.served(std::mem::take(&mut self.served));
        }
        if self.finished.is_empty() {
            return (0, 0);
        }
        let before = queue.next_used();
        if let Err(e) = queue.add_used_batch(mem, &self.finished) {
            crate::limited!(
                warn,
                "fs queue {}: cannot return {} requests: {e}",
                self.index,
                self.finished.len()
            );
        }
        self.finished.clear();
        (0, usize::from(queue.next_used().wrapping_sub(before)))
    }

    fn in_flight(&self) -> usize {
        0
    }

    fn wait(&mut self) -> Option<io::Result<()>> {
        None
    }

    fn completion_fd(&self) -> Option<RawFd> {
        None
    }
}
