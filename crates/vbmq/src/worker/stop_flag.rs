//! A queue's stop flag. The control threads stop a queue for a while (`GET_VRING_BASE`,
//! `SET_INFLIGHT_FD`) or for good (the connection ends), and may do so at the same time: the
//! flag is cleared only when the last stop for a while ends, and never after a stop for good.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Asks the serving thread to leave a queue alone.
#[derive(Debug, Default)]
pub struct StopFlag {
    flag: AtomicBool,
    /// Stops for a while under way, and whether the queue is stopped for good.
    holds: Mutex<(usize, bool)>,
}

/// A stop for a while: the flag stays set until it is dropped (and the others too).
#[derive(Debug)]
pub struct StopHold<'a>(&'a StopFlag);

impl StopFlag {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    fn holds(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the flag until the returned hold is dropped.
    pub fn hold(&self) -> StopHold<'_> {
        let mut holds = self.holds();
        holds.0 += 1;
        self.flag.store(true, Ordering::Release);
        StopHold(self)
    }

    /// Sets the flag for good.
    pub fn stop_for_good(&self) {
        let mut holds = self.holds();
        holds.1 = true;
        self.flag.store(true, Ordering::Release);
    }

    /// Whether the serving thread must leave the queue alone.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// The flag itself, for a serving loop to read.
    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }
}

/// A queue's worker, as the stop-and-drain steps see it.
pub trait Drain {
    /// Completes every request in flight; returns how many there were.
    fn drain_in_flight(&mut self) -> usize;
}

/// A queue stopped for a while and drained: its worker, held until this is dropped; the queue
/// then runs again (unless it is stopped for good, or by another).
pub struct Drained<'a, W> {
    // Declared first, dropped first: the worker is let go before the flag is cleared.
    worker: MutexGuard<'a, W>,
    _hold: StopHold<'a>,
    /// Requests that were in flight, now completed.
    pub drained: usize,
    /// How long taking the worker from its serving thread took.
    pub waited: Duration,
}

impl<W> Deref for Drained<'_, W> {
    type Target = W;

    fn deref(&self) -> &W {
        &self.worker
    }
}

impl<W> DerefMut for Drained<'_, W> {
    fn deref_mut(&mut self) -> &mut W {
        &mut self.worker
    }
}

fn take<W>(worker: &Mutex<W>) -> MutexGuard<'_, W> {
    worker.lock().unwrap_or_else(|p| p.into_inner())
}

impl StopFlag {
    /// Stops the queue for a while: sets the flag, takes `worker` once its serving thread has
    /// left its pass, and completes what is in flight.
    pub fn stop_and_drain<'a, W: Drain>(&'a self, worker: &'a Mutex<W>) -> Drained<'a, W> {
        let started = Instant::now();
        let hold = self.hold();
        let mut worker = take(worker);
        let waited = started.elapsed();
        let drained = worker.drain_in_flight();
        Drained {
            worker,
            _hold: hold,
            drained,
            waited,
        }
    }

    /// Stops the queue for good: sets the flag, takes `worker` once its serving thread has left
    /// its pass, and completes what is in flight.
    pub fn stop_for_good_and_drain<W: Drain>(&self, worker: &Mutex<W>) {
        self.stop_for_good();
        take(worker).drain_in_flight();
    }
}

impl Drop for StopHold<'_> {
    fn drop(&mut self) {
        let mut holds = self.0.holds();
        holds.0 = holds.0.saturating_sub(1);
        if holds.0 == 0 && !holds.1 {
            self.0.flag.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::{Drain, StopFlag};

    /// A worker with requests in flight.
    struct Busy(usize);

    impl Drain for Busy {
        fn drain_in_flight(&mut self) -> usize {
            std::mem::take(&mut self.0)
        }
    }

    #[test]
    fn a_queue_stopped_and_drained_runs_again_once_let_go_unless_stopped_for_good() {
        let (stop, worker) = (StopFlag::new(), Mutex::new(Busy(3)));
        let drained = stop.stop_and_drain(&worker);
        assert_eq!(drained.drained, 3);
        assert_eq!(drained.0, 0);
        assert!(stop.is_set() && worker.try_lock().is_err());
        drop(drained);
        assert!(!stop.is_set() && worker.try_lock().is_ok());
        *worker.lock().unwrap() = Busy(2);
        stop.stop_for_good_and_drain(&worker);
        assert_eq!(worker.lock().unwrap().0, 0);
        drop(stop.stop_and_drain(&worker));
        assert!(stop.is_set(), "cleared after a stop for good");
    }

    #[test]
    fn cleared_by_the_last_hold_and_never_after_a_stop_for_good() {
        let stop = StopFlag::new();
        let (a, b) = (stop.hold(), stop.hold());
        drop(a);
        assert!(stop.is_set(), "cleared while another stopper holds it");
        drop(b);
        assert!(!stop.is_set());
        let hold = stop.hold();
        stop.stop_for_good();
        drop(hold);
        assert!(stop.is_set(), "cleared after a stop for good");
    }
}
