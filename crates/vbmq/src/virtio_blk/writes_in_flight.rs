//! Writes in flight, so that a shrinking resize can wait for those checked against the old
//! capacity before it cuts the storage: one the kernel carried out past the new end afterwards
//! would grow the file again. Each queue counts its own (no line shared on the data path), in
//! two epochs: a resize opens a new epoch and waits only for the old one's writes, so writes
//! that keep coming under the new capacity never hold it up.
//!
//! Two counts serve any number of epochs because a new one is opened only once the one before
//! the current is drained (its count is then free for the new epoch), and one wait at a time
//! (a named snapshot and a shrinking resize may overlap): a second wait would otherwise open
//! an epoch over a count still holding the first one's older writes, and miss them.

use std::sync::Mutex;
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
    /// Held by a wait: epochs are opened one wait at a time (control plane only).
    waiting: Mutex<()>,
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
            waiting: Mutex::new(()),
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

    /// Opens a new epoch and waits, at most `timeout`, until every write begun before it has
    /// ended: first those of the epoch before the current one (left by an earlier wait that
    /// timed out, whose count the new epoch takes over), then the current one's. Called after
    /// the capacity was lowered; false if some are still going (no epoch is opened if the
    /// first are).
    pub fn wait_for_older(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let _one_at_a_time = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.epoch.load(Ordering::SeqCst);
        if !self.wait_until_ended(WriteTicket(u8::from(current & 1 == 0)), deadline) {
            return false;
        }
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.wait_until_ended(WriteTicket(u8::from(current & 1 == 1)), deadline)
    }

    /// Waits until no write counted with `ticket` remains, or `deadline` passes.
    fn wait_until_ended(&self, ticket: WriteTicket, deadline: Instant) -> bool {
        loop {
            let busy = (0..self.queues.len())
                .any(|queue| self.count(queue, ticket).load(Ordering::SeqCst) != 0);
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

    #[test]
    fn a_wait_after_one_that_timed_out_still_waits_for_the_oldest_writes() {
        let writes = WritesInFlight::new(1);
        let oldest = writes.begin(0);
        // A named snapshot's wait gives up while the write is still going...
        assert!(!writes.wait_for_older(Duration::ZERO));
        // ...and a shrinking resize's wait that follows must not miss it.
        assert!(!writes.wait_for_older(Duration::ZERO), "the oldest write");
        writes.end(0, oldest);
        assert!(writes.wait_for_older(Duration::ZERO));
    }

    #[test]
    fn overlapping_waits_each_see_every_write_begun_before_them() {
        let writes = std::sync::Arc::new(WritesInFlight::new(2));
        let oldest = writes.begin(1);
        let first = {
            let writes = std::sync::Arc::clone(&writes);
            std::thread::spawn(move || writes.wait_for_older(Duration::from_secs(60)))
        };
        let second = {
            let writes = std::sync::Arc::clone(&writes);
            std::thread::spawn(move || writes.wait_for_older(Duration::from_secs(60)))
        };
        // Both waits are under way (the epoch moved at least once) while the write goes on.
        while writes.epoch.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let newer = writes.begin(0);
        writes.end(0, newer);
        assert!(!first.is_finished() && !second.is_finished());
        writes.end(1, oldest);
        assert!(first.join().unwrap() && second.join().unwrap());
    }
}
