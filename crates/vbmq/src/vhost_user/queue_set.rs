//! The queues of one connection and the epoll handlers of its daemon: what every device's
//! backend does with them alike (dispatching an event to its queue, stopping them all).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vhost_user_backend::{VhostUserBackend, VringEpollHandler};
use vmm_sys_util::epoll::EventSet;

use super::connection::{Connection, lock};
use super::queue_handle::QueueHandle;
use crate::guest::Vring;
use crate::worker::QueueHandler;

/// The queues of a connection of backend `B`, each `H`'s.
pub(super) struct QueueSet<H: QueueHandler + 'static, B: VhostUserBackend> {
    queues: Vec<QueueHandle<H>>,
    /// The daemon's epoll handlers, to register completion eventfds with.
    handlers: Mutex<Vec<Arc<VringEpollHandler<Arc<B>>>>>,
    /// Set for good when the connection ends or the process stops.
    shut_down: AtomicBool,
}

impl<H: QueueHandler + 'static, B: VhostUserBackend> std::ops::Deref for QueueSet<H, B> {
    type Target = [QueueHandle<H>];

    fn deref(&self) -> &Self::Target {
        &self.queues
    }
}

impl<H: QueueHandler + 'static, B: VhostUserBackend> QueueSet<H, B> {
    /// The set of `queues`, not yet attached to a daemon.
    pub fn new(queues: Vec<QueueHandle<H>>) -> Self {
        QueueSet {
            queues,
            handlers: Mutex::new(Vec::new()),
            shut_down: AtomicBool::new(false),
        }
    }

    /// Gives the set the epoll handlers of its daemon.
    pub fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<B>>>>) {
        *lock(&self.handlers) = handlers;
    }

    /// Stops every queue for good, completing what is in flight first, and ends the crate's
    /// threads' waits.
    pub fn stop_all(&self) {
        self.shut_down.store(true, Ordering::Release);
        for (index, queue) in self.queues.iter().enumerate() {
            queue.stop_for_good();
            crate::limited!(debug, "queue {index} stopped");
        }
        for handler in lock(&self.handlers).drain(..) {
            handler.send_exit_event();
        }
    }

    /// The event id of queue completions, the limit timer and the CPU thread's notices on each
    /// thread's epoll (above the crate's own ids).
    fn completion_event(&self) -> u16 {
        u16::try_from(self.queues.len()).unwrap_or(u16::MAX - 1) + 1
    }

    /// Serves `device_event` of the crate's thread `thread_id` (one queue a thread). Errors are
    /// logged, never returned: the crate would end this queue's thread.
    pub fn handle_event(
        &self,
        device_event: u16,
        vrings: &[Vring],
        thread_id: usize,
        connection: &Connection,
    ) {
        if self.shut_down.load(Ordering::Acquire) {
            return;
        }
        let (Some(queue), Some(vring)) = (self.queues.get(thread_id), vrings.first()) else {
            crate::limited!(warn, "event {device_event} for unknown thread {thread_id}");
            return;
        };
        let completion_event = self.completion_event();
        queue.serve_event(
            thread_id,
            device_event,
            completion_event,
            vring,
            connection,
            |fd| match lock(&self.handlers).get(thread_id) {
                Some(handler) => {
                    handler.register_listener(fd, EventSet::IN, u64::from(completion_event))
                }
                None => Ok(()),
            },
        );
    }
}
