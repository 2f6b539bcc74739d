//! One queue of a connection, whatever the device: its worker, shared between the thread that
//! serves it and the control thread, and who serves it. A queue pinned to a CPU in `poll` or
//! `adaptive` mode is served by that CPU's thread ([`cpu_poller`]), shared with every other such
//! queue of the process, disk or share; the crate's thread of the queue then only passes the
//! guest's kicks on. Other queues are served by their crate thread, driving their own worker.
//! The per-queue mutex is taken by the serving thread when it serves, and by the control thread
//! only to stop the queue: never per request.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::connection::Connection;
use crate::guest::Vring;
use crate::worker::cpu_poller::{self, CpuPoller, QueueCell};
use crate::worker::{QueueHandler, QueueSettings, QueueWorker};

/// One queue of a connection.
pub(super) struct QueueHandle<H: QueueHandler + 'static> {
    pub cell: Arc<QueueCell<QueueWorker<H>>>,
    /// The CPU thread that serves the queue; `None`: the crate's thread of the queue does.
    poller: Option<Arc<CpuPoller>>,
    /// Handed to `poller` (on the queue's first event of the connection).
    attached: AtomicBool,
}

impl<H: QueueHandler + 'static> std::ops::Deref for QueueHandle<H> {
    type Target = QueueCell<QueueWorker<H>>;

    fn deref(&self) -> &Self::Target {
        &self.cell
    }
}

/// The CPU thread for a queue with these settings, if it is to have one.
fn poller_for(index: usize, settings: &QueueSettings) -> Option<Arc<CpuPoller>> {
    let cpu = settings.shared_cpu()?;
    cpu_poller::poller_of(cpu)
        .map_err(|e| {
            crate::limited!(
                warn,
                "queue {index}: no thread for CPU {cpu}, one of its own: {e}"
            )
        })
        .ok()
}

impl<H: QueueHandler + 'static> QueueHandle<H> {
    /// Queue `index` of `connection`, run as `settings` say, around its `worker`.
    pub fn new(
        index: usize,
        settings: &QueueSettings,
        mut worker: QueueWorker<H>,
        connection: &Connection,
    ) -> Self {
        worker.stop_also_on(connection.memory_broken.clone());
        worker.report_broken_ring_to(connection.ring_broken.clone());
        QueueHandle {
            cell: Arc::new(QueueCell::new(worker)),
            poller: poller_for(index, settings),
            attached: AtomicBool::new(false),
        }
    }

    /// Stops the queue for good, completing what is in flight first, and takes it off its
    /// CPU's thread.
    pub fn stop_for_good(&self) {
        self.stop.stop_for_good_and_drain(&self.worker);
        if let Some(poller) = &self.poller {
            poller.remove(&*self.cell);
        }
    }

    /// Serves an event of queue `thread_id` on the crate's thread of the queue: a kick, the
    /// ring being enabled, or `completion_event` (completions, the limit timer, or the CPU
    /// thread's notice). `register` adds a descriptor to this thread's epoll, as
    /// `completion_event`.
    pub fn serve_event(
        &self,
        thread_id: usize,
        device_event: u16,
        completion_event: u16,
        vring: &Vring,
        connection: &Connection,
        register: impl Fn(RawFd) -> io::Result<()>,
    ) {
        if let Some(poller) = &self.poller {
            self.pass_on(
                thread_id,
                poller,
                device_event == completion_event,
                vring,
                connection,
                register,
            );
            return;
        }
        let mut worker = self.lock();
        let first = !worker.is_set_up();
        let completion = worker.set_up(vring, true);
        if first {
            // Completions and the limit timer wake the thread alike.
            for fd in completion.into_iter().chain(worker.limit_timer_fd()) {
                if let Err(e) = register(fd) {
                    crate::limited!(warn, "queue {thread_id}: cannot wait for completions: {e}");
                }
            }
        }
        if device_event == completion_event {
            worker.clear_completion_event();
        }
        worker.run(vring, self.stop.flag());
        drop(worker);
        connection.close_if_broken(thread_id);
    }

    /// The crate's thread of a queue a CPU thread serves: hands the queue over on its first
    /// event, then passes kicks on, and closes the connection when the CPU thread found its
    /// guest memory or its ring broken.
    fn pass_on(
        &self,
        thread_id: usize,
        poller: &CpuPoller,
        notice: bool,
        vring: &Vring,
        connection: &Connection,
        register: impl Fn(RawFd) -> io::Result<()>,
    ) {
        if notice {
            self.notice.read();
            connection.close_if_broken(thread_id);
            return;
        }
        if !self.attached.swap(true, Ordering::AcqRel) {
            let mut worker = self.lock();
            let completion = worker.set_up(vring, false);
            for fd in completion.into_iter().chain(worker.limit_timer_fd()) {
                if let Err(e) = poller.watch(fd, false) {
                    crate::limited!(warn, "queue {thread_id}: cannot wait for completions: {e}");
                }
            }
            drop(worker);
            if let Err(e) = register(self.notice.as_raw_fd()) {
                crate::limited!(warn, "queue {thread_id}: cannot watch its memory: {e}");
            }
            poller.add(self.cell.clone(), vring.clone());
        }
        poller.watch_kick(&*self.cell, vring);
        poller.wake();
    }
}
