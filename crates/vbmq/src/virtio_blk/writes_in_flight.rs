//! Writes in flight, so that a shrinking resize can wait for those checked against the old
//! capacity before it cuts the storage: one the kernel carried out past the new end afterwards
//! would grow the file again. Each queue counts its own (no line shared on the data path), in
//! two epochs: a resize opens a new epoch and waits only for the old one's writes, so writes
//! that keep coming under the new capacity never hold it up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One queue's counts, per epoch, on a cache line of its own.
#[repr(align(128))]
#[derive(Debug, Default)]
struct QueueCounts([AtomicU64; 2]);

/// The writes in flight of one device's queues.
#[derive(Debug)]
pub struct WritesInFlight {
    queues: Box<[QueueCounts]>,
    /// The current epoch (its low bit picks the count).
    epoch: AtomicU64,
}

/// A write counted in an epoch, to be ended with [`WritesInFlight::end`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTicket(u8);

impl WritesInFlight {
    /// Counts for `queues` queues.
    pub fn new(queues: usize) -> Self {
        WritesInFlight {
            queues: (0..queues.max(1)).map(|_| QueueCounts::default()).collect(),
            epoch: AtomicU64::new(0),
        }
    }

    fn count(&self, queue: usize, ticket: WriteTicket) -> &AtomicU64 {
        let counts = self.queues.get(queue).unwrap_or(&self.queues[0]);
        &counts.0[usize::from(ticket.0)]
    }

    /// A write of `queue` is about to be checked against the capacity (again) and started.
    /// Sequentially consistent with [`Self::wait_for_older`]: either the resize sees this write
    /// and waits for it, or the write's check that follows sees the new capacity.
    pub fn begin(&self, queue: usize) -> WriteTicket {
        let ticket = WriteTicket(u8::from(self.epoch.load(Ordering::SeqCst) & 1 == 1));
        self.count(queue, ticket).fetch_add(1, Ordering::SeqCst);
        ticket
    }

    /// The write counted with `ticket` is done (or was never started).
    pub fn end(&self, queue: usize, ticket: WriteTicket) {
        self.count(queue, ticket).fetch_sub(1, Ordering::SeqCst);
    }

    /// Opens a new epoch and waits, at most `timeout`, until every write begun in the one
    /// before has ended. Called after the capacity was lowered; false if some are still going.
    pub fn wait_for_older(&self, timeout: Duration) -> bool {
        let old = WriteTicket(u8::from(self.epoch.fetch_add(1, Ordering::SeqCst) & 1 == 1));
        let deadline = Instant::now() + timeout;
        loop {
            let busy = (0..self.queues.len())
                .any(|queue| self.count(queue, old).load(Ordering::SeqCst) != 0);
            if !busy {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::WritesInFlight;

    #[test]
    fn a_resize_waits_for_older_writes_only() {
        let writes = WritesInFlight::new(2);
        let old = writes.begin(1);
        assert!(!writes.wait_for_older(Duration::from_millis(20)));
        // The epoch moved on: a write begun now does not hold the next wait for the old one.
        let new = writes.begin(0);
        writes.end(1, old);
        assert!(
            !writes.wait_for_older(Duration::from_millis(20)),
            "the newer write"
        );
        writes.end(0, new);
        assert!(writes.wait_for_older(Duration::ZERO));
    }
}
