//! From runs to figures: per-run samples, and medians with min and max over the runs.

use serde::Serialize;

use super::client::LoadResult;
use super::snapshots::SnapshotTaken;
pub use super::stat::Stat;
use super::systems::System;
use super::workloads::Case;

/// The figures of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSample {
    /// Requests per second.
    pub iops: f64,
    /// Megabytes (10^6 bytes) per second.
    pub mb_s: f64,
    /// Median latency, microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile latency, microseconds.
    pub p999_us: f64,
    /// Backend CPU-seconds per 10^6 requests (utime+stime of its process).
    pub backend_cpu_s_per_mio: Option<f64>,
    /// Backend CPU use as a fraction of one CPU.
    pub backend_cpu_util: Option<f64>,
    /// Client process CPU use as a fraction of one CPU.
    pub client_cpu_util: Option<f64>,
    /// Other processes' CPU use on the client's and backend's CPUs, as a fraction of one CPU.
    pub others_cpu_util: Option<f64>,
}

impl RunSample {
    /// The sample of a run, or `None` if no request completed in its window.
    pub fn from_load(r: &LoadResult) -> Option<Self> {
        if r.ios == 0 || r.seconds <= 0.0 {
            return None;
        }
        let ios = r.ios as f64;
        Some(RunSample {
            iops: ios / r.seconds,
            mb_s: r.bytes as f64 / r.seconds / 1e6,
            p50_us: r.latency.quantile_us(0.5)?,
            p99_us: r.latency.quantile_us(0.99)?,
            p999_us: r.latency.quantile_us(0.999)?,
            backend_cpu_s_per_mio: r.backend_cpu_seconds.map(|c| c / ios * 1e6),
            backend_cpu_util: r.backend_cpu_seconds.map(|c| c / r.seconds),
            client_cpu_util: r.client_cpu_seconds.map(|c| c / r.seconds),
            others_cpu_util: r.others_cpu_seconds.map(|c| c / r.seconds),
        })
    }
}

/// Medians (with min and max) of every figure of a system in a case.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Requests per second.
    pub iops: Stat,
    /// Megabytes per second.
    pub mb_s: Stat,
    /// Median latency, microseconds.
    pub p50_us: Stat,
    /// 99th percentile latency, microseconds.
    pub p99_us: Stat,
    /// 99.9th percentile latency, microseconds.
    pub p999_us: Stat,
    /// Backend CPU-seconds per 10^6 requests.
    pub backend_cpu_s_per_mio: Option<Stat>,
    /// Backend CPU use, fraction of one CPU.
    pub backend_cpu_util: Option<Stat>,
    /// Client CPU use, fraction of one CPU.
    pub client_cpu_util: Option<Stat>,
    /// Other processes' CPU use on the benchmark's CPUs, fraction of one CPU.
    pub others_cpu_util: Option<Stat>,
}

impl Summary {
    /// The summary of `runs`, or `None` if there are none.
    pub fn of(runs: &[RunSample]) -> Option<Summary> {
        let stat = |f: fn(&RunSample) -> f64| Stat::of(&runs.iter().map(f).collect::<Vec<_>>());
        let opt = |f: fn(&RunSample) -> Option<f64>| {
            Stat::of(&runs.iter().filter_map(f).collect::<Vec<_>>())
        };
        Some(Summary {
            iops: stat(|r| r.iops)?,
            mb_s: stat(|r| r.mb_s)?,
            p50_us: stat(|r| r.p50_us)?,
            p99_us: stat(|r| r.p99_us)?,
            p999_us: stat(|r| r.p999_us)?,
            backend_cpu_s_per_mio: opt(|r| r.backend_cpu_s_per_mio),
            backend_cpu_util: opt(|r| r.backend_cpu_util),
            client_cpu_util: opt(|r| r.client_cpu_util),
            others_cpu_util: opt(|r| r.others_cpu_util),
        })
    }
}

/// One system's runs in one case.
#[derive(Clone, Debug, Serialize)]
pub struct PointResult {
    /// The system's identifier.
    pub system: System,
    /// Its human-readable name.
    pub label: String,
    /// Every successful run, in order.
    pub runs: Vec<RunSample>,
    /// Why runs failed, if any did.
    pub errors: Vec<String>,
    /// Things that did not spoil a run, e.g. a backend that did not exit cleanly.
    pub warnings: Vec<String>,
    /// Why the system was not run at all.
    pub skipped: Option<String>,
    /// Medians over `runs`.
    pub summary: Option<Summary>,
    /// The snapshots taken during its runs (the "writes during snapshots" case).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotTaken>,
}

impl PointResult {
    /// An empty point for `system`.
    pub fn new(system: System) -> Self {
        PointResult {
            system,
            label: system.to_string(),
            runs: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            skipped: None,
            summary: None,
            snapshots: Vec::new(),
        }
    }
}

/// Every system's results in one case.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    /// The case's identifier.
    pub id: String,
    /// What was run.
    #[serde(flatten)]
    pub case: Case,
    /// One entry per system, in the case's order.
    pub points: Vec<PointResult>,
}

impl CaseResult {
    /// The summary of `system` in this case, if it ran.
    pub fn summary(&self, system: System) -> Option<&Summary> {
        self.points
            .iter()
            .find(|p| p.system == system)
            .and_then(|p| p.summary.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::histogram::Histogram;
    use std::time::Duration;

    #[test]
    fn median_min_max() {
        let s = Stat::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Stat::of(&[]), None);
        assert_eq!(Stat::of(&[f64::NAN, 5.0]).unwrap().median, 5.0);
    }

    #[test]
    fn sample_from_load() {
        let mut latency = Histogram::default();
        for _ in 0..1000 {
            latency.record(Duration::from_micros(10));
        }
        let load = LoadResult {
            ios: 1000,
            bytes: 1000 * 4096,
            seconds: 0.5,
            latency,
            backend_cpu_seconds: Some(0.25),
            client_cpu_seconds: None,
            others_cpu_seconds: None,
        };
        let s = RunSample::from_load(&load).unwrap();
        assert_eq!(s.iops, 2000.0);
        assert!((s.mb_s - 8.192).abs() < 1e-9);
        assert!((s.p50_us - 10.0).abs() < 0.2);
        assert_eq!(s.backend_cpu_s_per_mio, Some(250.0));
        assert_eq!(s.backend_cpu_util, Some(0.5));
        assert_eq!(s.client_cpu_util, None);
        let empty = LoadResult {
            ios: 0,
            bytes: 0,
            seconds: 0.5,
            latency: Histogram::default(),
            backend_cpu_seconds: None,
            client_cpu_seconds: None,
            others_cpu_seconds: None,
        };
        assert!(RunSample::from_load(&empty).is_none());
    }

    #[test]
    fn summary_takes_medians() {
        let run = |iops: f64, cpu: Option<f64>| RunSample {
            iops,
            mb_s: iops / 1000.0,
            p50_us: 1e6 / iops,
            p99_us: 2e6 / iops,
            p999_us: 3e6 / iops,
            backend_cpu_s_per_mio: cpu,
            backend_cpu_util: cpu,
            client_cpu_util: None,
            others_cpu_util: None,
        };
        let s = Summary::of(&[
            run(100.0, Some(1.0)),
            run(300.0, None),
            run(200.0, Some(3.0)),
        ])
        .unwrap();
        assert_eq!(s.iops.median, 200.0);
        assert_eq!(s.iops.max, 300.0);
        assert_eq!(s.backend_cpu_s_per_mio.unwrap().median, 2.0);
        assert!(s.client_cpu_util.is_none());
        assert!(Summary::of(&[]).is_none());
    }
}
