//! What one connection may have in flight: a number of requests and a number of bytes of
//! data (a write's payload, a read's reply). A client that sends faster than its replies are
//! read waits here, and then in its own socket: backpressure, never memory.

use std::sync::{Condvar, Mutex};

/// Requests in flight on one connection at most (QEMU's NBD server allows 16; nbdcopy sends 64).
pub const MAX_REQUESTS: usize = 64;

/// The requests and bytes in flight on one connection, bounded.
pub struct InFlight {
    state: Mutex<Load>,
    freed: Condvar,
    max_bytes: usize,
}

#[derive(Default)]
struct Load {
    requests: usize,
    bytes: usize,
}

/// One request's place, given back when dropped.
pub struct Place<'a> {
    of: &'a InFlight,
    bytes: usize,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut load = self.of.lock();
        load.requests -= 1;
        load.bytes -= self.bytes;
        drop(load);
        self.of.freed.notify_all();
    }
}

impl InFlight {
    /// At most [`MAX_REQUESTS`] requests and `max_bytes` bytes (the largest request) at once.
    pub fn new(max_bytes: usize) -> Self {
        InFlight {
            state: Mutex::default(),
            freed: Condvar::new(),
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Load> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a place for a request of `bytes` (cut at the maximum, so that the largest
    /// request is served once nothing else is in flight).
    pub fn take(&self, bytes: usize) -> Place<'_> {
        let bytes = bytes.min(self.max_bytes);
        let mut load = self.lock();
        while load.requests >= MAX_REQUESTS || load.bytes + bytes > self.max_bytes {
            load = self.freed.wait(load).unwrap_or_else(|p| p.into_inner());
        }
        load.requests += 1;
        load.bytes += bytes;
        Place { of: self, bytes }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_request_waits_for_room_and_the_largest_fits_alone() {
        let in_flight = InFlight::new(100);
        let first = in_flight.take(60);
        let waited = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                // 60 + 60 > 100: waits for the first to go.
                let _second = in_flight.take(60);
                assert!(waited.load(Ordering::SeqCst), "the second waited for room");
            });
            waited.store(true, Ordering::SeqCst);
            drop(first);
        });
        // Larger than the whole budget: cut to it, served alone.
        drop(in_flight.take(1000));
    }

    #[test]
    fn at_most_max_requests_at_once() {
        let in_flight = InFlight::new(1 << 20);
        let places: Vec<_> = (0..MAX_REQUESTS).map(|_| in_flight.take(0)).collect();
        let waited = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let _one_more = in_flight.take(0);
                assert!(waited.load(Ordering::SeqCst), "one more waited for a place");
            });
            waited.store(true, Ordering::SeqCst);
            drop(places);
        });
    }
}
