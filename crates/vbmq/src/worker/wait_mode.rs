//! How a queue's I/O thread waits for work.

/// How a queue's I/O thread waits for work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Sleep on the guest's kick and on I/O completions.
    Event,
    /// Spin on the avail ring and the completion queue; guest kicks are suppressed.
    Poll,
    /// Spin while requests keep coming, sleep after `poll_us` of idleness.
    Adaptive,
}
