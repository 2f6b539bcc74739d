//! Rate limits for log messages a guest or a frontend can trigger: each call site prints at
//! most [`BURST`] messages per second, then one line saying how many it held back. A hostile
//! guest can repeat a bad request millions of times a second; the host's disk must not fill
//! with its log.
//!
//! Use [`limited!`](crate::limited) in place of `tracing`'s macros on every path a guest or
//! frontend drives: `limited!(debug, "request {head} rejected: {e}")`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Messages one call site may print per second.
pub const BURST: u64 = 10;

/// The state of one call site: the second its window started, and messages in that window.
#[derive(Debug)]
pub struct LogLimit {
    window: AtomicU64,
    count: AtomicU64,
}

fn now_secs() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs()
}

impl LogLimit {
    /// A call site that has printed nothing yet.
    pub const fn new() -> Self {
        LogLimit {
            window: AtomicU64::new(u64::MAX),
            count: AtomicU64::new(0),
        }
    }

    /// Whether a message may be printed now; `Some(held_back)` if so, with the number of
    /// messages suppressed in earlier windows since the last one printed.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(now_secs())
    }

    fn admit_at(&self, now: u64) -> Option<u64> {
        let window = self.window.load(Ordering::Relaxed);
        if window != now
            && self
                .window
                .compare_exchange(window, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // A new window: report what the last one held back. Racing threads may print a
            // few extra lines; none is lost from the count.
            let previous = self.count.swap(1, Ordering::Relaxed);
            return Some(previous.saturating_sub(BURST));
        }
        let seen = self.count.fetch_add(1, Ordering::Relaxed);
        (seen < BURST).then_some(0)
    }
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::new()
    }
}

/// A `tracing` event at `$level` (`debug`, `info`, `warn`, `error`), limited per call site to
/// [`BURST`](crate::log_limit::BURST) per second. The limiter is only consulted when the level
/// is enabled.
#[macro_export]
macro_rules! limited {
    (debug, $($arg:tt)+) => { $crate::limited!(@ DEBUG, debug, $($arg)+) };
    (info, $($arg:tt)+) => { $crate::limited!(@ INFO, info, $($arg)+) };
    (warn, $($arg:tt)+) => { $crate::limited!(@ WARN, warn, $($arg)+) };
    (error, $($arg:tt)+) => { $crate::limited!(@ ERROR, error, $($arg)+) };
    (@ $level:ident, $event:ident, $($arg:tt)+) => {{
        static LIMIT: $crate::log_limit::LogLimit = $crate::log_limit::LogLimit::new();
        if ::tracing::enabled!(::tracing::Level::$level)
            && let Some(held_back) = LIMIT.admit()
        {
            if held_back > 0 {
                ::tracing::$event!("{} ({held_back} more held back)", format_args!($($arg)+));
            } else {
                ::tracing::$event!($($arg)+);
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_site_prints_a_burst_per_second_then_counts() {
        let limit = LogLimit::new();
        let printed = (0..1000).filter(|_| limit.admit_at(7).is_some()).count();
        assert_eq!(printed as u64, BURST);
        // The next second: one line that says how many were held back.
        assert_eq!(limit.admit_at(8), Some(1000 - BURST));
        assert_eq!(limit.admit_at(8), Some(0));
    }
}
