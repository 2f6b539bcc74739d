//! A log-linear latency histogram: constant-time record, about 1.5% precision, mergeable.

use std::time::Duration;

/// Values below this are counted exactly; above it each power of two has `HALF` buckets.
const EXACT: u64 = 64;
const HALF: u64 = EXACT / 2;
const HALF_BITS: u32 = HALF.trailing_zeros();
const BUCKETS: usize = (EXACT + (64 - HALF_BITS as u64) * HALF) as usize;

/// Latencies in nanoseconds.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

impl Histogram {
    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ns)] += 1;
        self.total += 1;
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Number of latencies counted.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The latency at quantile `q` (0 < q <= 1) in microseconds, or `None` if empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(midpoint_of(bucket) as f64 / 1000.0);
            }
        }
        None
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < EXACT {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros();
    let shift = msb - HALF_BITS;
    let mantissa = ns >> shift; // in HALF..EXACT
    (EXACT + u64::from(shift - 1) * HALF + (mantissa - HALF)) as usize
}

fn midpoint_of(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT {
        return bucket;
    }
    let shift = (bucket - EXACT) / HALF + 1;
    let mantissa = (bucket - EXACT) % HALF + HALF;
    (mantissa << shift) + (1 << shift) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_precise() {
        let mut last = 0;
        for ns in (0..10_000_000u64)
            .step_by(997)
            .chain([u64::MAX / 2, u64::MAX])
        {
            let b = bucket_of(ns);
            assert!(b >= last && b < BUCKETS);
            last = b;
            let mid = midpoint_of(b) as f64;
            assert!(
                (mid - ns as f64).abs() <= ns as f64 * 0.016 + 1.0,
                "{ns} -> {mid}"
            );
        }
    }

    #[test]
    fn quantiles_of_known_distribution() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile_us(0.5).unwrap();
        let p99 = h.quantile_us(0.99).unwrap();
        assert!((p50 - 500.0).abs() < 10.0, "p50 {p50}");
        assert!((p99 - 990.0).abs() < 20.0, "p99 {p99}");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Histogram::default();
        let mut b = Histogram::default();
        a.record(Duration::from_nanos(10));
        b.record(Duration::from_micros(100));
        b.record(Duration::from_micros(100));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert!((a.quantile_us(1.0).unwrap() - 100.0).abs() < 2.0);
        assert_eq!(a.quantile_us(0.1).unwrap(), 0.01);
    }
}
