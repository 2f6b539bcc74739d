//! A measured run: what it asks and what it measured, and what every client shares (the CPU
//! time of the measured window, each job's offsets, joining the client threads).

use std::thread;
use std::time::{Duration, Instant};

use super::cpus::{CpuPlan, cpus_busy_seconds, process_cpu_seconds};
use super::error::{BenchError, Result};
use super::histogram::Histogram;
use super::rng::Rng;
use super::workloads::{ClientMode, Pattern, SPREAD_STRIDE, Workload};

/// One measured run.
#[derive(Clone, Copy, Debug)]
pub struct LoadSpec {
    /// What each job does.
    pub workload: Workload,
    /// Polling or interrupt-driven completion.
    pub client: ClientMode,
    /// Client threads, one queue each.
    pub jobs: usize,
    /// Time before measuring starts (caches, ring state, backend mode settle).
    pub warmup: Duration,
    /// Time measured.
    pub measure: Duration,
}

/// What a run measured. Only completions inside the measured window count.
#[derive(Debug)]
pub struct LoadResult {
    /// Requests completed.
    pub ios: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Length of the measured window in seconds.
    pub seconds: f64,
    /// Submission-to-completion latency of every counted request.
    pub latency: Histogram,
    /// CPU seconds the backend process used in the window, if there is a backend process.
    pub backend_cpu_seconds: Option<f64>,
    /// CPU seconds this (client) process used in the window.
    pub client_cpu_seconds: Option<f64>,
    /// CPU seconds other processes took on the client's and backend's CPUs in the window.
    pub others_cpu_seconds: Option<f64>,
}

/// The client threads' results; a thread that panicked is a failed request.
pub(super) fn join_jobs<T>(
    handles: Vec<thread::ScopedJoinHandle<'_, Result<T>>>,
) -> Vec<Result<T>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(BenchError::Request("client thread panicked".into())))
        })
        .collect()
}

/// CPU seconds spent in a run's measured window.
pub(super) struct WindowCpu {
    pub(super) backend: Option<f64>,
    pub(super) client: Option<f64>,
    /// By everything else on the client's and backend's CPUs: the interference of other work.
    pub(super) others: Option<f64>,
}

/// Samples CPU use at `start` and at `end`.
pub(super) fn cpu_over_window(
    backend: Option<u32>,
    cpus: &CpuPlan,
    start: Instant,
    end: Instant,
) -> WindowCpu {
    let me = std::process::id();
    let mut plan_cpus = cpus.client.clone();
    if !cpus.shared {
        plan_cpus.extend(&cpus.backend);
    }
    let read = |pid: Option<u32>| pid.and_then(|p| process_cpu_seconds(p).ok());
    let sample = || {
        let busy = cpus_busy_seconds(&plan_cpus).ok();
        (read(backend), read(Some(me)), busy)
    };
    thread::sleep(start.saturating_duration_since(Instant::now()));
    let (b0, c0, all0) = sample();
    thread::sleep(end.saturating_duration_since(Instant::now()));
    let (b1, c1, all1) = sample();
    let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    let (backend, client, all) = (diff(b0, b1), diff(c0, c1), diff(all0, all1));
    let ours = client.map(|c| c + backend.unwrap_or(0.0));
    WindowCpu {
        backend,
        client,
        others: diff(ours, all).map(|o| o.max(0.0)),
    }
}

/// Offsets for one job: random over the whole disk, or sequential over the job's own slice.
pub(super) struct Offsets {
    pattern: Pattern,
    block_size: u64,
    rng: Rng,
    first: u64,
    end: u64,
    next: u64,
}

impl Offsets {
    /// The offsets of job `index` of `jobs` on a disk of `capacity` bytes.
    pub(super) fn for_job(index: usize, jobs: usize, workload: Workload, capacity: u64) -> Self {
        let block_size = match workload.pattern {
            Pattern::Spread => u64::from(SPREAD_STRIDE.max(workload.block_size)),
            Pattern::Random | Pattern::Sequential => u64::from(workload.block_size),
        };
        let blocks = (capacity / block_size).max(1);
        let (first, end) = match workload.pattern {
            Pattern::Random => (0, blocks),
            Pattern::Sequential | Pattern::Spread => {
                let (index, jobs) = (index as u64, jobs.max(1) as u64);
                let first = blocks * index / jobs;
                (first, (blocks * (index + 1) / jobs).max(first + 1))
            }
        };
        Offsets {
            pattern: workload.pattern,
            block_size,
            rng: Rng::new(0x1234_5678 + index as u64),
            first,
            end,
            next: first,
        }
    }

    pub(super) fn next(&mut self) -> u64 {
        let block = match self.pattern {
            Pattern::Random => self.first + self.rng.below(self.end - self.first),
            Pattern::Sequential | Pattern::Spread => {
                let b = self.next;
                self.next = if b + 1 >= self.end { self.first } else { b + 1 };
                b
            }
        };
        block * self.block_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_writes_one_request_per_64k_in_order_and_wraps() {
        let w = Workload::spreadwrite(32);
        let mut offsets = Offsets::for_job(0, 1, w, 4 * u64::from(SPREAD_STRIDE));
        let got: Vec<u64> = (0..5).map(|_| offsets.next()).collect();
        assert_eq!(got, [0, 65536, 131072, 196608, 0]);
    }
}
