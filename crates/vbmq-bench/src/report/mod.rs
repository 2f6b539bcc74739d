//! The report: report.json (every run), report.md (tables, goals, charts) and the SVG charts.

mod figures;
mod machine;
mod markdown;
mod svg;
pub mod table;

use std::fs;
use std::path::Path;

use serde::Serialize;

use super::cache_study::HitRatio;
use super::calibrate::Handover;
use super::cpus::CpuPlan;
use super::error::{BenchError, Result};
use super::goals::GoalResult;
use super::runner::Settings;
use super::stats::CaseResult;

pub use machine::{Machine, load_average, utc_now};

/// Everything a benchmark run produced.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The command that produced it.
    pub command: String,
    /// When it started, UTC.
    pub date_utc: String,
    /// Whether it was `--quick`.
    pub quick: bool,
    /// Where it ran.
    pub machine: Machine,
    /// Which CPUs the client and the backends had.
    pub cpus: CpuPlan,
    /// Run length and count.
    pub settings: Settings,
    /// Backing file size in bytes.
    pub disk_bytes: u64,
    /// 1-minute load average when the runs started and when they ended.
    pub load_average: [Option<f64>; 2],
    /// The machine's floors: one-way hand-over latency between the client and backend CPUs.
    pub handover: Option<Handover>,
    /// Systems that were not run, and why.
    pub skipped: Vec<String>,
    /// Every case with every run.
    pub cases: Vec<CaseResult>,
    /// The goals with their measured ratios.
    pub goals: Vec<GoalResult>,
    /// vbmq's cache hit ratios in the cache placement study.
    pub cache_hit_ratios: Vec<HitRatio>,
    /// False if the run was interrupted before the end.
    pub complete: bool,
}

/// Writes report.json, report.md and the charts into `dir` (created if missing).
pub fn write(dir: &Path, report: &Report) -> Result<()> {
    let io = |what: &str, e| BenchError::io(format!("writing {}/{what}", dir.display()), e);
    fs::create_dir_all(dir).map_err(|e| io("", e))?;
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| BenchError::Request(format!("serialising report.json: {e}")))?;
    fs::write(dir.join("report.json"), json + "\n").map_err(|e| io("report.json", e))?;
    let figures = figures::render(&report.cases);
    for f in &figures {
        fs::write(dir.join(f.file), &f.svg).map_err(|e| io(f.file, e))?;
    }
    fs::write(dir.join("report.md"), markdown::render(report, &figures))
        .map_err(|e| io("report.md", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{PointResult, RunSample, Summary};
    use crate::systems::System;
    use crate::workloads::{Case, ClientMode, Experiment, Workload};

    #[test]
    fn writes_a_well_formed_report() {
        let run = RunSample {
            iops: 1000.0,
            mb_s: 4.096,
            p50_us: 10.0,
            p99_us: 20.0,
            p999_us: 30.0,
            backend_cpu_s_per_mio: None,
            backend_cpu_util: None,
            client_cpu_util: Some(1.0),
            others_cpu_util: None,
        };
        let mut point = PointResult::new(System::BareMetal);
        point.runs.push(run);
        point.summary = Summary::of(&point.runs);
        let case = Case {
            experiment: Experiment::Matrix,
            workload: Workload::randread(1),
            client: ClientMode::Polling,
            jobs: 1,
            systems: vec![System::BareMetal],
        };
        let cases = vec![CaseResult {
            id: case.id(),
            case,
            points: vec![point],
        }];
        let report = Report {
            command: "vbmq bench --quick".into(),
            date_utc: "2026-01-01T00:00:00Z".into(),
            quick: true,
            machine: Machine::detect(None),
            cpus: CpuPlan::detect().unwrap(),
            settings: Settings::new(true),
            disk_bytes: 1 << 30,
            load_average: [Some(0.5), None],
            handover: None,
            skipped: vec!["qsd-vbdp: not installed".into()],
            goals: crate::goals::evaluate(&cases, None),
            cases,
            cache_hit_ratios: Vec::new(),
            complete: true,
        };
        let dir = std::env::temp_dir().join(format!("vbmq-report-test-{}", std::process::id()));
        write(&dir, &report).unwrap();
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
        assert_eq!(json["cases"][0]["points"][0]["system"], "bare-metal");
        assert_eq!(
            json["cases"][0]["points"][0]["summary"]["iops"]["median"],
            1000.0
        );
        assert_eq!(json["goals"].as_array().unwrap().len(), 14);
        let md = fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("## Goals") && md.contains("qsd-vbdp: not installed"));
        assert!(md.contains("![") && dir.join("matrix.svg").exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
