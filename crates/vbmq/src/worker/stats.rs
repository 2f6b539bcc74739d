//! Per-queue counters. The queue's thread is their only writer, so a relaxed load and store
//! suffice (no read-modify-write on the hot path); readers see a recent value.

use std::sync::atomic::{AtomicU64, Ordering};

/// What one queue has served.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Requests completed (successfully or not).
    pub requests: AtomicU64,
    /// Requests completed with an error status.
    pub errors: AtomicU64,
    /// Bytes read by the guest.
    pub read_bytes: AtomicU64,
    /// Bytes written by the guest.
    pub write_bytes: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl QueueStats {
    /// Counts one completed request.
    pub fn record(&self, ok: bool, read: u64, written: u64) {
        bump(&self.requests, 1);
        if ok {
            bump(&self.read_bytes, read);
            bump(&self.write_bytes, written);
        } else {
            bump(&self.errors, 1);
        }
    }

    /// `requests=… errors=… read_bytes=… write_bytes=…`, for the log.
    pub fn summary(&self) -> String {
        format!(
            "requests={} errors={} read_bytes={} write_bytes={}",
            self.requests.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
        )
    }
}
