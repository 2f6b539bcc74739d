//! Per-queue sequential stream detection (read-ahead is what makes a hypervisor-side
//! cache pay off for streaming reads). Random access never triggers it.

/// Sequential reads in a row before read-ahead starts.
const TRIGGER: u32 = 2;
/// First and largest read-ahead window, in bytes.
const MIN_WINDOW: u64 = 128 << 10;
const MAX_WINDOW: u64 = 2 << 20;

/// One queue's stream detector.
#[derive(Debug, Default)]
pub struct Readahead {
    /// The largest window: read-ahead must not flush the cache it fills.
    max_window: u64,
    /// Where the last read ended.
    next: Option<u64>,
    /// Reads in a row that started where the previous one ended.
    run: u32,
    /// The size of the next read-ahead.
    window: u64,
    /// The size of the last one.
    last: u64,
    /// Read-ahead has been issued up to here.
    ahead: u64,
}

impl Readahead {
    /// A detector for a cache of `cache_bytes`.
    pub fn new(cache_bytes: u64) -> Self {
        Readahead {
            max_window: (cache_bytes / 16).clamp(MIN_WINDOW, MAX_WINDOW),
            ..Readahead::default()
        }
    }

    /// Records a guest read and returns the byte range to prefetch now, if any; `capacity`
    /// bounds it.
    pub fn observe(&mut self, offset: u64, len: u64, capacity: u64) -> Option<(u64, u64)> {
        let end = offset.saturating_add(len);
        if self.next == Some(offset) && len > 0 {
            self.run = self.run.saturating_add(1);
        } else {
            self.run = 0;
            self.window = MIN_WINDOW;
            self.last = 0;
            self.ahead = 0;
        }
        self.next = Some(end);
        if self.run < TRIGGER {
            return None;
        }
        // Issue the next window once the stream is half way through the last one.
        if self.ahead >= end.saturating_add(self.last / 2) {
            return None;
        }
        let start = self.ahead.max(end);
        let stop = end.saturating_add(self.window).min(capacity);
        if start >= stop {
            return None;
        }
        self.ahead = stop;
        self.last = stop - start;
        self.window = (self.window * 2).min(self.max_window);
        Some((start, stop - start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_stream_is_prefetched_in_growing_windows() {
        let mut ra = Readahead::new(1 << 30);
        assert_eq!(ra.observe(0, 4096, 1 << 30), None);
        assert_eq!(ra.observe(4096, 4096, 1 << 30), None);
        assert_eq!(ra.observe(8192, 4096, 1 << 30), Some((12288, MIN_WINDOW)));
        // Still well ahead: nothing new.
        assert_eq!(ra.observe(12288, 4096, 1 << 30), None);
        let mut offset = 16384;
        let mut issued = Vec::new();
        while offset < 4 << 20 {
            if let Some(range) = ra.observe(offset, 4096, 1 << 30) {
                issued.push(range);
            }
            offset += 4096;
        }
        assert!(issued.len() >= 2);
        assert!(
            issued.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0),
            "{issued:?}"
        );
        assert!(issued.iter().any(|r| r.1 > MIN_WINDOW), "the window grows");
    }

    #[test]
    fn random_reads_never_prefetch() {
        let mut ra = Readahead::new(1 << 30);
        for i in 0..1000u64 {
            let offset = (i * 7919 % 1000) * 4096;
            assert_eq!(ra.observe(offset, 4096, 1 << 30), None);
        }
    }

    #[test]
    fn stops_at_the_end_of_the_disk() {
        let mut ra = Readahead::new(1 << 30);
        let cap = 20 * 4096;
        for i in 0..19 {
            if let Some((start, len)) = ra.observe(i * 4096, 4096, cap) {
                assert!(start + len <= cap);
            }
        }
    }
}
