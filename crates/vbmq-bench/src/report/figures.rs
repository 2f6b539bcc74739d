//! The charts, after the papers' figures, drawn from the case results.

use crate::bare;
use crate::stats::{CaseResult, Summary};
use crate::systems::System;
use crate::workloads::{ClientMode, Experiment, Workload};

use super::svg::{Series, bar_chart, line_chart};

/// One chart of the report.
#[derive(Clone, Debug)]
pub struct Figure {
    /// File name inside the report directory.
    pub file: &'static str,
    /// The experiment it illustrates.
    pub experiment: Experiment,
    /// One line saying what it shows.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

type Metric = fn(&Summary) -> f64;

fn iops(s: &Summary) -> f64 {
    s.iops.median
}

fn p50(s: &Summary) -> f64 {
    s.p50_us.median
}

/// Every figure that has data in `cases`.
pub fn render(cases: &[CaseResult]) -> Vec<Figure> {
    let mut figures = Vec::new();
    let matrix = of(cases, Experiment::Matrix);
    if !matrix.is_empty() {
        figures.push(matrix_relative(&matrix));
        let modes: Vec<System> = systems(&matrix)
            .into_iter()
            .filter(|s| matches!(s, System::Vbmq { .. }))
            .collect();
        if !modes.is_empty() {
            figures.push(bars(
                "fig8-iops.svg",
                Experiment::Matrix,
                "VBMq Fig. 8: vbmq polling against event-driven I/O threads, IOPS",
                "IOPS",
                &matrix,
                &modes,
                iops,
            ));
            figures.push(bars(
                "fig8-p50.svg",
                Experiment::Matrix,
                "VBMq Fig. 8: vbmq polling against event-driven I/O threads, median latency",
                "p50 latency (us)",
                &matrix,
                &modes,
                p50,
            ));
        }
    }
    let queues = of(cases, Experiment::Queues);
    if !queues.is_empty() {
        figures.push(lines(
            "fig7-queues.svg",
            Experiment::Queues,
            "VBMq Fig. 7: randread 4K QD32 per queue, IOPS against queues",
            "queues (one client job each)",
            "IOPS",
            &queues,
            iops,
        ));
    }
    let jobs = of(cases, Experiment::Jobs);
    if !jobs.is_empty() {
        figures.push(lines(
            "fig10-jobs-iops.svg",
            Experiment::Jobs,
            "VBMq Fig. 10: randread 4K QD1 per job, interrupt client, IOPS against jobs",
            "jobs (one queue each)",
            "IOPS",
            &jobs,
            iops,
        ));
        figures.push(lines(
            "fig10-jobs-p50.svg",
            Experiment::Jobs,
            "VBMq Fig. 10: randread 4K QD1 per job, interrupt client, latency against jobs",
            "jobs (one queue each)",
            "p50 latency (us)",
            &jobs,
            p50,
        ));
    }
    let batching = of(cases, Experiment::Batching);
    if !batching.is_empty() {
        let s = systems(&batching);
        figures.push(bars(
            "seed002-batching.svg",
            Experiment::Batching,
            "Seed 002: batched against one-request-per-call submission, IOPS",
            "IOPS",
            &batching,
            &s,
            iops,
        ));
    }
    if let Some(f) = client_modes(cases) {
        figures.push(f);
    }
    let null = of(cases, Experiment::Null);
    if !null.is_empty() {
        let s = systems(&null);
        figures.push(bars(
            "null.svg",
            Experiment::Null,
            "Null device: vbmq null= against qemu-storage-daemon null-co, IOPS",
            "IOPS",
            &null,
            &s,
            iops,
        ));
    }
    let cache = of(cases, Experiment::Cache);
    if !cache.is_empty() {
        let s = systems(&cache);
        figures.push(bars(
            "seed003-cache.svg",
            Experiment::Cache,
            "Seed 003: DRAM cache hits, hypervisor side against host page cache, IOPS",
            "IOPS",
            &cache,
            &s,
            iops,
        ));
    }
    figures
}

fn of(cases: &[CaseResult], e: Experiment) -> Vec<&CaseResult> {
    cases.iter().filter(|c| c.case.experiment == e).collect()
}

/// Systems in the order they first appear.
fn systems(cases: &[&CaseResult]) -> Vec<System> {
    let mut out = Vec::new();
    for c in cases {
        for p in &c.points {
            if !out.contains(&p.system) {
                out.push(p.system);
            }
        }
    }
    out
}

fn value(case: &CaseResult, system: System, metric: Metric) -> Option<f64> {
    case.summary(system).map(metric)
}

fn bars(
    file: &'static str,
    experiment: Experiment,
    title: &str,
    y_label: &str,
    cases: &[&CaseResult],
    systems: &[System],
    metric: Metric,
) -> Figure {
    let categories: Vec<String> = cases.iter().map(|c| c.case.workload.to_string()).collect();
    let series: Vec<Series> = systems
        .iter()
        .map(|&s| Series {
            name: s.to_string(),
            values: cases.iter().map(|c| value(c, s, metric)).collect(),
        })
        .collect();
    Figure {
        file,
        experiment,
        caption: title.to_string(),
        svg: bar_chart(title, y_label, &categories, &series),
    }
}

fn lines(
    file: &'static str,
    experiment: Experiment,
    title: &str,
    x_label: &str,
    y_label: &str,
    cases: &[&CaseResult],
    metric: Metric,
) -> Figure {
    let xs: Vec<f64> = cases.iter().map(|c| c.case.jobs as f64).collect();
    let series: Vec<Series> = systems(cases)
        .into_iter()
        .map(|s| Series {
            name: s.to_string(),
            values: cases.iter().map(|c| value(c, s, metric)).collect(),
        })
        .collect();
    Figure {
        file,
        experiment,
        caption: title.to_string(),
        svg: line_chart(title, x_label, y_label, &xs, &series),
    }
}

/// Every system's IOPS divided by the best bare engine's in the same case.
fn matrix_relative(cases: &[&CaseResult]) -> Figure {
    let title = "All systems, 1 queue, polling client: IOPS relative to the best bare engine";
    let categories: Vec<String> = cases.iter().map(|c| c.case.workload.to_string()).collect();
    Figure {
        file: "matrix.svg",
        experiment: Experiment::Matrix,
        caption: title.to_string(),
        svg: bar_chart(
            title,
            "IOPS / best bare IOPS",
            &categories,
            &relative_to_best_bare(cases),
        ),
    }
}

/// One series per system: its IOPS over the best bare engine's, case by case.
fn relative_to_best_bare(cases: &[&CaseResult]) -> Vec<Series> {
    systems(cases)
        .into_iter()
        .map(|s| Series {
            name: s.to_string(),
            values: cases
                .iter()
                .map(|c| {
                    let of = |s| value(c, s, iops);
                    let bare = of(bare::best(System::BareMetal, true, of))?;
                    Some(of(s)? / bare)
                })
                .collect(),
        })
        .collect()
}

/// Seed 004: each system's randread QD1 latency with a polling and an interrupt client.
fn client_modes(cases: &[CaseResult]) -> Option<Figure> {
    let find = |e: Experiment, client: ClientMode| {
        cases.iter().find(|c| {
            c.case.experiment == e
                && c.case.client == client
                && c.case.workload == Workload::randread(1)
                && c.case.jobs == 1
        })
    };
    let irq = find(Experiment::InterruptClient, ClientMode::Interrupt)?;
    let polling = find(Experiment::Matrix, ClientMode::Polling);
    let systems = systems(&[irq]);
    let categories: Vec<String> = systems.iter().map(System::to_string).collect();
    let series = vec![
        Series {
            name: "polling client".into(),
            values: systems
                .iter()
                .map(|&s| polling.and_then(|c| value(c, s, p50)))
                .collect(),
        },
        Series {
            name: "interrupt client".into(),
            values: systems.iter().map(|&s| value(irq, s, p50)).collect(),
        },
    ];
    let title = "Seed 004: polling against interrupt completion in the client, randread 4K QD1";
    Some(Figure {
        file: "seed004-client.svg",
        experiment: Experiment::InterruptClient,
        caption: title.to_string(),
        svg: bar_chart(title, "p50 latency (us)", &categories, &series),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{PointResult, RunSample};
    use crate::systems::WaitMode;
    use crate::workloads::Case;

    fn case(workload: Workload, iops: &[(System, f64)]) -> CaseResult {
        let points = iops
            .iter()
            .map(|&(system, iops)| {
                let mut p = PointResult::new(system);
                p.runs.push(RunSample {
                    iops,
                    mb_s: 0.0,
                    p50_us: 1.0,
                    p99_us: 1.0,
                    p999_us: 1.0,
                    backend_cpu_s_per_mio: None,
                    backend_cpu_util: None,
                    client_cpu_util: None,
                    others_cpu_util: None,
                });
                p.summary = Summary::of(&p.runs);
                p
            })
            .collect();
        let case = Case {
            experiment: Experiment::Matrix,
            workload,
            client: ClientMode::Polling,
            jobs: 1,
            systems: iops.iter().map(|(s, _)| *s).collect(),
        };
        CaseResult {
            id: case.id(),
            case,
            points,
        }
    }

    #[test]
    fn the_matrix_chart_divides_by_the_best_bare_engine_of_each_case() {
        let poll = System::vbmq(WaitMode::Poll);
        let (uring, psync) = (System::BareMetal, System::BareMetalPsync);
        let reads = case(
            Workload::randread(32),
            &[(uring, 300.0), (psync, 600.0), (poll, 480.0)],
        );
        let writes = case(
            Workload::randwrite(32),
            &[(uring, 500.0), (psync, 400.0), (poll, 450.0)],
        );
        let series = relative_to_best_bare(&[&reads, &writes]);
        let vbmq = series.iter().find(|s| s.name == poll.to_string()).unwrap();
        assert_eq!(vbmq.values, [Some(0.8), Some(0.9)]);
    }
}
