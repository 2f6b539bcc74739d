//! The performance goals of issue 3, each a ratio of medians taken in one run.

use serde::Serialize;

use super::bare;
use super::cache_study;
use super::calibrate::Handover;
use super::snapshots::SnapshotFigures;
use super::stats::{CaseResult, Summary};
use super::systems::{DiskSetup, System, WaitMode};
use super::workloads::{ClientMode, Experiment, Workload};

/// Which figure a goal compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Requests per second: higher is better.
    Iops,
    /// Median latency: lower is better.
    P50Us,
    /// Backend CPU-seconds per 10^6 requests: lower is better.
    BackendCpuSPerMio,
}

impl Metric {
    fn higher_is_better(self) -> bool {
        matches!(self, Metric::Iops)
    }

    fn of(self, s: &Summary) -> Option<f64> {
        match self {
            Metric::Iops => Some(s.iops.median),
            Metric::P50Us => Some(s.p50_us.median),
            Metric::BackendCpuSPerMio => s.backend_cpu_s_per_mio.map(|c| c.median),
        }
    }
}

/// A goal's definition.
struct Goal {
    what: &'static str,
    experiment: Experiment,
    workload: Workload,
    client: ClientMode,
    system: System,
    reference: System,
    metric: Metric,
    /// The ratio system/reference must be at least (`at_least`) or at most this.
    threshold: f64,
    at_least: bool,
}

/// A goal with what this run measured.
#[derive(Clone, Debug, Serialize)]
pub struct GoalResult {
    /// The goal, as in issue 3.
    pub goal: &'static str,
    /// The target, e.g. `>= 0.9x bare metal`.
    pub target: String,
    /// The vbmq configuration measured.
    pub system: System,
    /// What it is compared with.
    pub reference: System,
    /// The figure compared.
    pub metric: Metric,
    /// vbmq's median.
    pub value: Option<f64>,
    /// The reference's median.
    pub reference_value: Option<f64>,
    /// value / reference_value.
    pub ratio: Option<f64>,
    /// Whether the target holds; `None` if either side was not measured.
    pub met: Option<bool>,
    /// Where the time went (CPU use, the machine's floor).
    pub note: String,
}

fn goals() -> impl Iterator<Item = Goal> {
    block_goals().into_iter().chain(cloud_goals())
}

/// The goals of a plain disk against bare metal, qemu-storage-daemon and the page cache.
fn block_goals() -> [Goal; 9] {
    let matrix = |what, workload, metric, reference, system, threshold, at_least| Goal {
        what,
        experiment: Experiment::Matrix,
        workload,
        client: ClientMode::Polling,
        system,
        reference,
        metric,
        threshold,
        at_least,
    };
    let poll = System::vbmq(WaitMode::Poll);
    [
        matrix(
            "randread 4K QD32, polling client, mode=poll",
            Workload::randread(32),
            Metric::Iops,
            System::BareMetal,
            poll,
            0.95,
            true,
        ),
        matrix(
            "randwrite 4K QD32, polling client, mode=poll",
            Workload::randwrite(32),
            Metric::Iops,
            System::BareMetal,
            poll,
            0.95,
            true,
        ),
        matrix(
            "randread 4K QD1 p50, polling client, mode=poll",
            Workload::randread(1),
            Metric::P50Us,
            System::BareMetal,
            poll,
            1.3,
            false,
        ),
        Goal {
            what: "randread 4K QD1 p50, interrupt client, mode=adaptive",
            experiment: Experiment::InterruptClient,
            workload: Workload::randread(1),
            client: ClientMode::Interrupt,
            system: System::vbmq(WaitMode::Adaptive),
            reference: System::QsdVbdp,
            metric: Metric::P50Us,
            threshold: 0.3,
            at_least: false,
        },
        matrix(
            "backend CPU per I/O, randread 4K QD32, polling client, mode=adaptive",
            Workload::randread(32),
            Metric::BackendCpuSPerMio,
            System::QsdVbdp,
            System::vbmq(WaitMode::Adaptive),
            0.5,
            false,
        ),
        Goal {
            what: "null device, randread 4K QD32, polling client, mode=poll",
            experiment: Experiment::Null,
            workload: Workload::randread(32),
            client: ClientMode::Polling,
            system: System::vbmq_null(WaitMode::Poll),
            reference: System::QsdNull,
            metric: Metric::Iops,
            threshold: 4.0,
            at_least: true,
        },
        Goal {
            what: "DRAM cache hit (mem=), randread 4K QD32, polling client, mode=poll",
            experiment: Experiment::Cache,
            workload: Workload::randread(32),
            client: ClientMode::Polling,
            system: System::vbmq_on(DiskSetup::Memory, WaitMode::Poll),
            reference: System::BareMetalPageCache,
            metric: Metric::Iops,
            threshold: 1.0,
            at_least: true,
        },
        Goal {
            what: "DRAM cache hit (cache=), randread 4K QD32, polling client, mode=adaptive",
            experiment: Experiment::Cache,
            workload: Workload::randread(32),
            client: ClientMode::Polling,
            system: cache_study::cached(cache_study::FITS_PERCENT, WaitMode::Adaptive),
            reference: System::BareMetalPageCache,
            metric: Metric::Iops,
            threshold: 1.0,
            at_least: true,
        },
        Goal {
            what: "DRAM cache hit (cache=) p50, randread 4K QD1, polling client, mode=adaptive",
            experiment: Experiment::Cache,
            workload: Workload::randread(1),
            client: ClientMode::Polling,
            system: cache_study::cached(cache_study::FITS_PERCENT, WaitMode::Adaptive),
            reference: System::BareMetalPageCache,
            metric: Metric::P50Us,
            threshold: 1.0,
            at_least: false,
        },
    ]
}

/// The goals of the cloud disks' layers against the plain disk.
fn cloud_goals() -> [Goal; 5] {
    [
        cloud(
            "encrypted disk (encrypt=aes-xts), randread 4K QD32, polling client, mode=poll",
            Workload::randread(32),
            DiskSetup::Encrypted,
            0.7,
        ),
        cloud(
            "encrypted disk (encrypt=aes-xts), randwrite 4K QD32, polling client, mode=poll",
            Workload::randwrite(32),
            DiskSetup::Encrypted,
            0.7,
        ),
        cloud(
            "base= disk, reads of untouched blocks (the base's), randread 4K QD32, mode=poll",
            Workload::randread(32),
            DiskSetup::Thin { copied: false },
            0.9,
        ),
        cloud(
            "changed-block tracking (1 checkpoint live), randwrite 4K QD32, mode=poll",
            Workload::randwrite(32),
            DiskSetup::Tracked,
            0.9,
        ),
        cloud(
            "writes while copy-before-write snapshots run, randwrite 4K QD32, mode=poll",
            Workload::randwrite(32),
            DiskSetup::Snapshotting,
            SNAPSHOT_THRESHOLD,
        ),
    ]
}

/// The writes-during-snapshots goal, against the copy's bound rather than the plain disk: each
/// first write to a 64 KiB block waits for that block's copy, so while most blocks are not yet
/// copied, writes all over the disk go at about one per block copied (the snapshot's MB/s over
/// 64 KiB): a ratio to the plain disk would say how fast the machine copies, not how well vbmq
/// does. At least half that bound: the write path adds little beyond its copies, while the
/// control thread's copying shares the queue's CPU.
const SNAPSHOT_THRESHOLD: f64 = 0.5;

/// Whether `g` is measured against the copy's bound ([`SNAPSHOT_THRESHOLD`]).
fn against_copy_bound(g: &Goal) -> bool {
    matches!(
        g.system,
        System::Vbmq {
            storage: DiskSetup::Snapshotting,
            ..
        }
    )
}

/// The snapshots taken during `system`'s runs in `case`, summed up.
fn snapshots_of(case: &CaseResult, system: System) -> Option<SnapshotFigures> {
    let point = case.points.iter().find(|p| p.system == system)?;
    SnapshotFigures::of(&point.snapshots, point.runs.len())
}

/// An issue 27 goal: `storage`'s IOPS at least `threshold` times the plain disk's.
fn cloud(what: &'static str, workload: Workload, storage: DiskSetup, threshold: f64) -> Goal {
    Goal {
        what,
        experiment: Experiment::CloudDisks,
        workload,
        client: ClientMode::Polling,
        system: System::vbmq_on(storage, WaitMode::Poll),
        reference: System::vbmq(WaitMode::Poll),
        metric: Metric::Iops,
        threshold,
        at_least: true,
    }
}

/// Evaluates every goal against `cases`; `handover` (the machine's wake-up cost) lets a latency
/// goal state its floor.
pub fn evaluate(cases: &[CaseResult], handover: Option<&Handover>) -> Vec<GoalResult> {
    goals()
        .map(|g| {
            let case = cases.iter().find(|c| {
                c.case.experiment == g.experiment
                    && c.case.workload == g.workload
                    && c.case.client == g.client
                    && c.case.jobs == 1
            });
            let value_of = |s: System| case.and_then(|c| c.summary(s)).and_then(|s| g.metric.of(s));
            let value = value_of(g.system);
            let reference = bare::best(g.reference, g.metric.higher_is_better(), value_of);
            let bound = against_copy_bound(&g);
            let reference_value = if bound {
                case.and_then(|c| snapshots_of(c, g.system))
                    .map(|f| f.first_write_bound())
            } else {
                value_of(reference)
            };
            let ratio = match (value, reference_value) {
                (Some(v), Some(r)) if r > 0.0 => Some(v / r),
                _ => None,
            };
            let met = ratio.map(|r| {
                if g.at_least {
                    r >= g.threshold
                } else {
                    r <= g.threshold
                }
            });
            let op = if g.at_least { ">=" } else { "<=" };
            let note = case.map(|c| note(&g, c, handover)).unwrap_or_default();
            let target = if bound {
                "the copy's bound (snapshot MB/s / 64 KiB)".to_string()
            } else {
                bare::describe(g.reference)
            };
            GoalResult {
                goal: g.what,
                target: format!("{op} {}x {target}", g.threshold),
                system: g.system,
                reference,
                metric: g.metric,
                value,
                reference_value,
                ratio,
                met,
                note,
            }
        })
        .collect()
}

/// Where vbmq's time went in the goal's case: its CPU use on each side and, for an interrupt
/// client's latency, the wake-up that no backend can avoid on this machine.
fn note(g: &Goal, case: &CaseResult, handover: Option<&Handover>) -> String {
    let mut parts = Vec::new();
    if let Some(s) = case.summary(g.system) {
        let pct = |st: Option<crate::stats::Stat>| {
            st.map_or("?".to_string(), |st| format!("{:.0}%", st.median * 100.0))
        };
        parts.push(format!(
            "vbmq: client CPU {}, backend CPU {}",
            pct(s.client_cpu_util),
            pct(s.backend_cpu_util)
        ));
    }
    if g.experiment == Experiment::CloudDisks {
        let cpu = |s: System| {
            case.summary(s)
                .and_then(|s| s.backend_cpu_s_per_mio)
                .map_or("?".to_string(), |c| format!("{:.2}", c.median))
        };
        parts.push(format!(
            "backend CPU s per 10^6 I/O: {} against {}",
            cpu(g.system),
            cpu(g.reference)
        ));
        if let Some(f) = snapshots_of(case, g.system) {
            let iops = |s: System| case.summary(s).map(|s| s.iops.median);
            if let (Some(v), Some(plain)) = (iops(g.system), iops(g.reference)) {
                parts.push(format!(
                    "{:.4}x the plain disk's IOPS; copy's bound {:.0} writes/s",
                    v / plain,
                    f.first_write_bound()
                ));
            }
            parts.push(f.describe());
        }
    }
    let reference = case.summary(g.reference).map(|s| s.p50_us.median);
    if let (Metric::P50Us, ClientMode::Interrupt, Some(h), Some(reference)) =
        (g.metric, g.client, handover, reference)
    {
        // The part no backend can remove: telling the sleeping client its request is done.
        parts.push(format!(
            "one wake-up of the client alone costs {:.1} us = {:.2}x {}",
            h.wakeup_p50_us,
            h.wakeup_p50_us / reference,
            g.reference
        ));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{PointResult, RunSample};
    use crate::workloads::Case;

    fn point(system: System, iops: f64, p50: f64, cpu: f64) -> PointResult {
        let run = RunSample {
            iops,
            mb_s: 0.0,
            p50_us: p50,
            p99_us: p50,
            p999_us: p50,
            backend_cpu_s_per_mio: Some(cpu),
            backend_cpu_util: None,
            client_cpu_util: None,
            others_cpu_util: None,
        };
        let mut p = PointResult::new(system);
        p.summary = Summary::of(std::slice::from_ref(&run));
        p.runs.push(run);
        p
    }

    fn case(workload: Workload, points: Vec<PointResult>) -> CaseResult {
        let case = Case {
            experiment: Experiment::Matrix,
            workload,
            client: ClientMode::Polling,
            jobs: 1,
            systems: points.iter().map(|p| p.system).collect(),
        };
        CaseResult {
            id: case.id(),
            case,
            points,
        }
    }

    #[test]
    fn ratios_and_verdicts() {
        let cases = vec![
            case(
                Workload::randread(32),
                vec![
                    point(System::BareMetal, 100.0, 1.0, 0.0),
                    point(System::vbmq(WaitMode::Poll), 95.0, 1.0, 3.0),
                    point(System::vbmq(WaitMode::Adaptive), 90.0, 1.0, 4.0),
                    point(System::QsdVbdp, 50.0, 1.0, 6.0),
                ],
            ),
            case(
                Workload::randread(1),
                vec![
                    point(System::BareMetal, 1.0, 4.0, 0.0),
                    point(System::vbmq(WaitMode::Poll), 1.0, 6.0, 0.0),
                ],
            ),
        ];
        let results = evaluate(&cases, None);
        assert_eq!(results.len(), 14);
        assert_eq!(results[0].ratio, Some(0.95));
        assert_eq!(results[0].met, Some(true));
        // randwrite was not measured.
        assert_eq!(results[1].ratio, None);
        assert_eq!(results[1].met, None);
        // 6 us against 4 us: 1.5x, above 1.3x.
        assert_eq!(results[2].ratio, Some(1.5));
        assert_eq!(results[2].met, Some(false));
        // CPU: 4 against 6.
        let cpu = &results[4];
        assert!((cpu.ratio.unwrap() - 4.0 / 6.0).abs() < 1e-9);
        assert_eq!(cpu.met, Some(false));
        assert!(cpu.target.starts_with("<= 0.5x VBDP"));
        assert!(cpu.note.starts_with("vbmq: client CPU"));
    }

    #[test]
    fn dram_goals_compare_with_the_best_page_cache_engine() {
        let cached = cache_study::cached(cache_study::FITS_PERCENT, WaitMode::Adaptive);
        // io_uring reads of the page cache go through a kernel worker: pread is far faster.
        let mut qd32 = case(
            Workload::randread(32),
            vec![
                point(System::BareMetalPageCache, 155e3, 6.2, 0.0),
                point(System::BareMetalPageCachePsync, 1.1e6, 0.8, 0.0),
                point(cached, 550e3, 1.5, 0.0),
            ],
        );
        let mut qd1 = qd32.clone();
        qd1.case.workload = Workload::randread(1);
        qd32.case.experiment = Experiment::Cache;
        qd1.case.experiment = Experiment::Cache;
        let results = evaluate(&[qd32, qd1], None);
        for g in &results[6..9] {
            assert_eq!(g.reference, System::BareMetalPageCachePsync, "{}", g.goal);
            assert!(g.target.ends_with("the best bare page-cache engine"));
        }
        let iops = &results[7];
        assert_eq!(iops.reference_value, Some(1.1e6));
        assert_eq!(iops.ratio, Some(0.5));
        assert_eq!(iops.met, Some(false));
        let p50 = &results[8];
        assert_eq!(p50.reference_value, Some(0.8));
        assert_eq!(p50.met, Some(false));
    }

    #[test]
    fn direct_goals_compare_with_the_best_direct_engine() {
        let poll = System::vbmq(WaitMode::Poll);
        let cases = [case(
            Workload::randread(32),
            vec![
                point(System::BareMetal, 330e3, 3.6, 0.0),
                point(System::BareMetalPsync, 720e3, 1.1, 0.0),
                point(poll, 684e3, 2.0, 0.0),
            ],
        )];
        let g = &evaluate(&cases, None)[0];
        assert_eq!(g.reference, System::BareMetalPsync);
        assert_eq!(g.ratio, Some(0.95));
        assert!(g.target.ends_with("the best bare engine"));
    }

    #[test]
    fn cloud_disk_goals_compare_with_the_plain_disk() {
        let crypt = System::vbmq_on(DiskSetup::Encrypted, WaitMode::Poll);
        let mut c = case(
            Workload::randread(32),
            vec![
                point(System::vbmq(WaitMode::Poll), 400e3, 2.0, 2.0),
                point(crypt, 300e3, 2.0, 2.8),
            ],
        );
        c.case.experiment = Experiment::CloudDisks;
        let results = evaluate(&[c], None);
        let g = &results[9];
        assert_eq!(g.system, crypt);
        assert_eq!(g.ratio, Some(0.75));
        assert_eq!(g.met, Some(true));
        assert!(g.target.starts_with(">= 0.7x vbmq poll"), "{}", g.target);
        assert!(
            g.note
                .contains("backend CPU s per 10^6 I/O: 2.80 against 2.00"),
            "{}",
            g.note
        );
        // The thin disk was not measured.
        assert_eq!(results[11].met, None);
    }

    #[test]
    fn snapshot_goal_states_the_snapshots_beside_the_ratio() {
        let plain = System::vbmq(WaitMode::Poll);
        let tracked = System::vbmq_on(DiskSetup::Tracked, WaitMode::Poll);
        let during = System::vbmq_on(DiskSetup::Snapshotting, WaitMode::Poll);
        let mut snapshotting = point(during, 100e3, 2.0, 5.0);
        snapshotting.snapshots = vec![crate::snapshots::SnapshotTaken {
            began_s: 0.0,
            ended_s: 0.5,
            bytes: 1 << 30,
            seconds: 0.5,
            window_s: 1.0,
        }];
        let mut c = case(
            Workload::randwrite(32),
            vec![
                point(plain, 400e3, 2.0, 2.0),
                point(tracked, 380e3, 2.0, 2.1),
                snapshotting,
            ],
        );
        c.case.experiment = Experiment::CloudDisks;
        let results = evaluate(&[c], None);
        let tracking = &results[12];
        assert_eq!(tracking.system, tracked);
        assert_eq!(tracking.ratio, Some(0.95));
        assert_eq!(tracking.met, Some(true));
        assert!(!tracking.note.contains("snapshots"), "{}", tracking.note);
        let g = &results[13];
        assert_eq!(g.system, during);
        // 1 GiB in 0.5 s is 32768 blocks of 64 KiB a second: 100K IOPS is above it.
        assert_eq!(g.reference_value, Some(32768.0));
        assert_eq!(g.met, Some(true));
        assert!(
            g.target
                .ends_with("the copy's bound (snapshot MB/s / 64 KiB)")
        );
        assert!(
            g.note
                .contains("0.2500x the plain disk's IOPS; copy's bound 32768 writes/s"),
            "{}",
            g.note
        );
        assert!(g.note.contains("5.00 against 2.00"), "{}", g.note);
        assert!(
            g.note
                .contains("1 snapshots, each 0.50 s (0.50-0.50) at 2147 MB/s"),
            "{}",
            g.note
        );
        assert!(
            g.note.ends_with("running 50% of the measured time"),
            "{}",
            g.note
        );
    }

    #[test]
    fn interrupt_latency_goal_states_the_wakeup_cost() {
        let mut c = case(
            Workload::randread(1),
            vec![
                point(System::BareMetal, 1.0, 7.0, 0.0),
                point(System::vbmq(WaitMode::Adaptive), 1.0, 25.0, 0.0),
                point(System::QsdVbdp, 1.0, 40.0, 0.0),
            ],
        );
        c.case.experiment = Experiment::InterruptClient;
        c.case.client = ClientMode::Interrupt;
        let handover = Handover {
            wakeup_p50_us: 14.0,
            spin_p50_us: 0.1,
        };
        let results = evaluate(&[c], Some(&handover));
        let g = &results[3];
        assert_eq!(g.ratio, Some(25.0 / 40.0));
        assert!(
            g.note
                .contains("one wake-up of the client alone costs 14.0 us = 0.35x VBDP"),
            "{}",
            g.note
        );
    }
}
