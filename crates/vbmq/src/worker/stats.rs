//! Per-queue counters. The queue's serving thread is their only writer, so a relaxed load and
//! store suffice (no read-modify-write on the hot path); readers see a recent value.

use std::sync::atomic::{AtomicU64, Ordering};

use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};

/// Latency histogram buckets: bucket `i` counts requests that took less than 2^i microseconds
/// (the last one: everything slower).
pub const LATENCY_BUCKETS: usize = 24;

/// What kind of request, for the per-operation counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpKind {
    /// Reads (and GET_ID).
    #[default]
    Read,
    /// Writes.
    Write,
    /// Flushes.
    Flush,
    /// Discards, write-zeroes, and requests refused before they had a kind.
    Other,
}

impl OpKind {
    /// The names the counters are shown by.
    pub const NAMES: [&'static str; 4] = ["read", "write", "flush", "other"];
}

/// What one queue has served.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Requests completed (successfully or not).
    pub requests: AtomicU64,
    /// Requests completed with an error status.
    pub errors: AtomicU64,
    /// Of those, the ones answered `VIRTIO_BLK_S_UNSUPP` (the rest: `IOERR`).
    pub unsupported: AtomicU64,
    /// Time the serving thread slept waiting for this queue's kicks or completions, ns.
    pub sleep_ns: AtomicU64,
    /// Bytes read by the guest.
    pub read_bytes: AtomicU64,
    /// Bytes written by the guest.
    pub write_bytes: AtomicU64,
    /// Requests by kind ([`OpKind::NAMES`]).
    pub ops: [AtomicU64; 4],
    /// Requests in flight after the last pass.
    pub in_flight: AtomicU64,
    /// Passes over the ring, and those that found work (poll efficiency).
    pub passes: AtomicU64,
    /// Passes that took or completed a request.
    pub busy_passes: AtomicU64,
    /// Completed requests by latency (see [`LATENCY_BUCKETS`]).
    pub latency: [AtomicU64; LATENCY_BUCKETS],
    /// Sum of the latencies, nanoseconds.
    pub latency_ns: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// The bucket of a latency.
fn bucket(latency_ns: u64) -> usize {
    let us = latency_ns / 1000;
    let index = (u64::BITS - us.leading_zeros()) as usize;
    index.min(LATENCY_BUCKETS - 1)
}

impl QueueStats {
    /// Counts one completed request with its virtio-blk `status`, `latency_ns` after it was
    /// taken off the ring (0: not timed, completed when taken).
    pub fn record(&self, kind: OpKind, status: u32, read: u64, written: u64, latency_ns: u64) {
        bump(&self.requests, 1);
        bump(&self.ops[kind as usize], 1);
        if status == VIRTIO_BLK_S_OK {
            bump(&self.read_bytes, read);
            bump(&self.write_bytes, written);
        } else {
            bump(&self.errors, 1);
            if status == VIRTIO_BLK_S_UNSUPP {
                bump(&self.unsupported, 1);
            }
        }
        bump(&self.latency[bucket(latency_ns)], 1);
        bump(&self.latency_ns, latency_ns);
    }

    /// Counts requests served whole within a pass (a share's: no status, bytes or latency of
    /// their own here).
    pub fn served(&self, requests: u64) {
        bump(&self.requests, requests);
    }

    /// Adds time the serving thread slept for this queue.
    pub fn slept(&self, ns: u64) {
        bump(&self.sleep_ns, ns);
    }

    /// Counts one pass, and whether it found work; `in_flight` after it.
    pub fn pass(&self, busy: bool, in_flight: usize) {
        bump(&self.passes, 1);
        if busy {
            bump(&self.busy_passes, 1);
        }
        self.in_flight.store(in_flight as u64, Ordering::Relaxed);
    }

    /// The latency below which `per_mille` thousandths of the requests completed, in
    /// microseconds: the upper bound of the bucket it falls in.
    pub fn latency_quantile_us(&self, per_mille: u64) -> Option<u64> {
        let counts: Vec<u64> = self
            .latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let target = (total.saturating_mul(per_mille.min(1000)))
            .div_ceil(1000)
            .max(1);
        let mut seen = 0;
        for (index, count) in counts.iter().enumerate() {
            seen += count;
            if seen >= target {
                return Some(1u64 << index);
            }
        }
        Some(1u64 << (LATENCY_BUCKETS - 1))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_power_of_two_buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(999), 0);
        assert_eq!(bucket(1_000), 1);
        assert_eq!(bucket(3_999), 2);
        assert_eq!(bucket(u64::MAX), LATENCY_BUCKETS - 1);
        let stats = QueueStats::default();
        for us in [1u64, 1, 1, 100] {
            stats.record(OpKind::Read, VIRTIO_BLK_S_OK, 4096, 0, us * 1000);
        }
        assert_eq!(stats.latency_quantile_us(500), Some(2));
        assert_eq!(stats.latency_quantile_us(990), Some(128));
        assert_eq!(stats.ops[0].load(Ordering::Relaxed), 4);
    }
}
