//! The result tables, as aligned text for the terminal and as Markdown for report.md.

use crate::bare;
use crate::goals::GoalResult;
use crate::stats::{CaseResult, PointResult, Stat};
use crate::systems::System;

use super::svg::short;

const CASE_HEADER: [&str; 12] = [
    "system",
    "IOPS",
    "MB/s",
    "p50 us",
    "p99 us",
    "p99.9 us",
    "CPU s/1M IO",
    "backend CPU",
    "client CPU",
    "others' CPU",
    "IOPS x bare",
    "IOPS x VBDP",
];

const GOAL_HEADER: [&str; 6] = ["goal", "target", "vbmq", "reference", "ratio", "met"];
const GOAL_HEADER_NOTES: [&str; 7] = [
    "goal",
    "target",
    "vbmq",
    "reference",
    "ratio",
    "met",
    "where the time goes",
];

/// A case's title line, e.g. `randread 4K QD32, polling client, 1 job`.
pub fn case_title(case: &CaseResult) -> String {
    let c = &case.case;
    let jobs = if c.jobs == 1 {
        "1 job/queue".to_string()
    } else {
        format!("{} jobs/queues", c.jobs)
    };
    format!("{}, {}, {jobs}", c.workload, c.client)
}

/// One row per system: medians, and IOPS ratios against the best bare engine and VBDP in the
/// same case.
fn case_rows(case: &CaseResult) -> Vec<Vec<String>> {
    let reference = |s: System| case.summary(s).map(|s| s.iops.median);
    // The best of the host's O_DIRECT engines; the cache cases compare with page-cache reads.
    let best = |s: System| reference(bare::best(s, true, reference));
    let bare = best(System::BareMetal).or_else(|| best(System::BareMetalPageCache));
    // qemu-storage-daemon's null-co and page-cache rows run VBDP's one-iothread setup too.
    let vbdp = reference(System::QsdVbdp)
        .or_else(|| reference(System::QsdNull))
        .or_else(|| reference(System::QsdPageCache));
    case.points
        .iter()
        .map(|p| point_row(p, bare, vbdp))
        .collect()
}

fn point_row(p: &PointResult, bare: Option<f64>, vbdp: Option<f64>) -> Vec<String> {
    let Some(s) = &p.summary else {
        let why = p
            .skipped
            .clone()
            .map(|w| format!("skipped: {w}"))
            .or_else(|| p.errors.first().map(|e| format!("failed: {e}")))
            .unwrap_or_else(|| "not run".into());
        let mut row = vec![p.label.clone(), why];
        row.resize(CASE_HEADER.len(), String::new());
        return row;
    };
    let med = |st: &Stat| short(st.median);
    let pct = |st: &Option<Stat>| {
        st.map(|st| format!("{:.0}%", st.median * 100.0))
            .unwrap_or_else(|| "-".into())
    };
    let ratio = |r: Option<f64>| {
        r.filter(|r| *r > 0.0)
            .map(|r| format!("{:.2}x", s.iops.median / r))
            .unwrap_or_else(|| "-".into())
    };
    vec![
        p.label.clone(),
        med(&s.iops),
        med(&s.mb_s),
        med(&s.p50_us),
        med(&s.p99_us),
        med(&s.p999_us),
        s.backend_cpu_s_per_mio
            .map(|c| short(c.median))
            .unwrap_or_else(|| "-".into()),
        pct(&s.backend_cpu_util),
        pct(&s.client_cpu_util),
        pct(&s.others_cpu_util),
        ratio(bare),
        ratio(vbdp),
    ]
}

/// The reference's median and, when it is bare metal, which engine was best in the case.
fn reference(g: &GoalResult) -> String {
    match g.reference_value {
        Some(v) if bare::engines(g.reference).is_some() => {
            format!("{} ({})", short(v), g.reference)
        }
        Some(v) => short(v),
        None => "-".into(),
    }
}

fn goal_rows(goals: &[GoalResult]) -> Vec<Vec<String>> {
    let value = |v: Option<f64>| v.map(short).unwrap_or_else(|| "-".into());
    goals
        .iter()
        .map(|g| {
            vec![
                g.goal.to_string(),
                g.target.clone(),
                value(g.value),
                reference(g),
                g.ratio
                    .map(|r| format!("{r:.2}x"))
                    .unwrap_or_else(|| "-".into()),
                match g.met {
                    Some(true) => "met".into(),
                    Some(false) => "NOT met".into(),
                    None => "not measured".into(),
                },
            ]
        })
        .collect()
}

/// A case as an aligned text table.
pub fn case_text(case: &CaseResult) -> String {
    text_table(&CASE_HEADER, &case_rows(case))
}

/// A case as a Markdown table.
pub fn case_markdown(case: &CaseResult) -> String {
    markdown_table(&CASE_HEADER, &case_rows(case))
}

/// The goals as an aligned text table, their notes below it.
pub fn goals_text(goals: &[GoalResult]) -> String {
    let mut out = text_table(&GOAL_HEADER, &goal_rows(goals));
    for g in goals.iter().filter(|g| !g.note.is_empty()) {
        out.push_str(&format!("  {}: {}\n", g.goal, g.note));
    }
    out
}

/// The goals as a Markdown table, with their notes.
pub fn goals_markdown(goals: &[GoalResult]) -> String {
    let rows: Vec<Vec<String>> = goal_rows(goals)
        .into_iter()
        .zip(goals)
        .map(|(mut row, g)| {
            row.push(g.note.clone());
            row
        })
        .collect();
    markdown_table(&GOAL_HEADER_NOTES, &rows)
}

fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        // A skipped row's message spans the rest of the line: it does not widen its column.
        if row.iter().skip(2).all(String::is_empty) && row.len() > 2 {
            widths[0] = widths[0].max(row[0].len());
            continue;
        }
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                out.push_str(&format!("{cell:<w$}"));
            } else {
                out.push_str(&format!("  {cell:>w$}"));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        if row.len() > 2 && row.iter().skip(2).all(String::is_empty) {
            out.push_str(&format!("{:<w$}  {}\n", row[0], row[1], w = widths[0]));
        } else {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
    }
    out
}

fn markdown_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!("|{}\n", "---|".repeat(header.len())));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{RunSample, Summary};
    use crate::systems::{DiskSetup, WaitMode};
    use crate::workloads::{Case, ClientMode, Experiment, Workload};

    fn run(iops: f64) -> RunSample {
        RunSample {
            iops,
            mb_s: iops * 4096.0 / 1e6,
            p50_us: 1e6 / iops,
            p99_us: 2e6 / iops,
            p999_us: 3e6 / iops,
            backend_cpu_s_per_mio: Some(5.0),
            backend_cpu_util: Some(1.0),
            client_cpu_util: Some(0.5),
            others_cpu_util: Some(0.25),
        }
    }

    fn point(system: System, iops: Option<f64>) -> PointResult {
        let mut p = PointResult::new(system);
        if let Some(iops) = iops {
            p.runs.push(run(iops));
            p.summary = Summary::of(&p.runs);
        } else {
            p.skipped = Some("qemu-storage-daemon is not installed".into());
        }
        p
    }

    fn sample_case() -> CaseResult {
        let case = Case {
            experiment: Experiment::Matrix,
            workload: Workload::randread(32),
            client: ClientMode::Polling,
            jobs: 1,
            systems: vec![],
        };
        CaseResult {
            id: case.id(),
            case,
            points: vec![
                point(System::BareMetal, Some(300_000.0)),
                point(System::vbmq(WaitMode::Poll), Some(270_000.0)),
                point(System::QsdVbdp, None),
            ],
        }
    }

    #[test]
    fn rows_carry_ratios_and_skips() {
        let rows = case_rows(&sample_case());
        assert_eq!(rows[0][9], "25%");
        assert_eq!(rows[0][10], "1.00x");
        assert_eq!(rows[1][10], "0.90x");
        assert_eq!(rows[1][11], "-", "no VBDP to compare with");
        assert_eq!(rows[1][1], "270K");
        assert!(rows[2][1].starts_with("skipped: qemu-storage-daemon"));
    }

    #[test]
    fn page_cache_rows_and_goals_name_the_best_engine() {
        let mut case = sample_case();
        case.points = vec![
            point(System::BareMetalPageCache, Some(155_000.0)),
            point(System::BareMetalPageCachePsync, Some(1_100_000.0)),
            point(
                System::vbmq_on(DiskSetup::Memory, WaitMode::Poll),
                Some(550_000.0),
            ),
        ];
        let rows = case_rows(&case);
        assert_eq!(rows[0][10], "0.14x");
        assert_eq!(rows[2][10], "0.50x", "against pread, not io_uring");
        let goal = GoalResult {
            goal: "DRAM",
            target: ">= 1x the best bare page-cache engine".into(),
            system: System::vbmq_on(DiskSetup::Memory, WaitMode::Poll),
            reference: System::BareMetalPageCachePsync,
            metric: crate::goals::Metric::Iops,
            value: Some(550_000.0),
            reference_value: Some(1_100_000.0),
            ratio: Some(0.5),
            met: Some(false),
            note: String::new(),
        };
        assert_eq!(
            goal_rows(&[goal])[0][3],
            "1.1M (bare metal (page cache, psync))"
        );
    }

    #[test]
    fn text_and_markdown_render_every_row() {
        let case = sample_case();
        let text = case_text(&case);
        assert_eq!(text.lines().count(), 4);
        assert!(text.lines().nth(3).unwrap().contains("skipped"));
        let md = case_markdown(&case);
        assert_eq!(md.lines().count(), 5);
        assert!(md.lines().all(|l| l.starts_with('|') && l.ends_with('|')));
        assert_eq!(
            case_title(&case),
            "randread 4K QD32, polling client, 1 job/queue"
        );
    }
}
