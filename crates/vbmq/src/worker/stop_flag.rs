//! A queue's stop flag. The control threads stop a queue for a while (`GET_VRING_BASE`,
//! `SET_INFLIGHT_FD`) or for good (the connection ends), and may do so at the same time: the
//! flag is cleared only when the last stop for a while ends, and never after a stop for good.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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
    use super::StopFlag;

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
