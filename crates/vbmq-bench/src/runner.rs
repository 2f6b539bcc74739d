//! Runs the cases: every system of a case once per round, rounds repeated, so slow drifts of a
//! shared machine hit every system alike (A B C A B C ...).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::{LoadSpec, run_load};
use super::cpus::CpuPlan;
use super::error::{BenchError, Result};
use super::launcher::Launcher;
use super::snapshots::{SnapshotJob, SnapshotTaken};
use super::stats::{CaseResult, PointResult, RunSample, Summary};
use super::systems::{DiskSetup, System, Target};
use super::workloads::{Case, Experiment};

/// Time a run may take beyond warm-up and measurement (connecting, draining, a slow request)
/// before its backend is killed.
const RUN_SLACK: Duration = Duration::from_secs(20);

/// What [`Runner::run_cases`] reports as it goes.
pub enum Shown<'a> {
    /// The cases of this experiment begin.
    Experiment(Experiment),
    /// A case has been measured.
    Case(&'a CaseResult),
}

/// How long and how often each point runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    /// Seconds before measuring starts in each run.
    pub warmup_s: f64,
    /// Seconds measured in each run.
    pub measure_s: f64,
    /// Runs per system and case (the median is quoted).
    pub runs: usize,
}

impl Settings {
    /// The full benchmark or the quick one.
    pub fn new(quick: bool) -> Self {
        if quick {
            Settings {
                warmup_s: 0.1,
                measure_s: 0.25,
                runs: 3,
            }
        } else {
            Settings {
                warmup_s: 0.25,
                measure_s: 1.0,
                runs: 3,
            }
        }
    }
}

/// Runs cases and remembers which systems cannot start.
pub struct Runner<'a> {
    launcher: &'a Launcher,
    cpus: &'a CpuPlan,
    settings: Settings,
    stop: &'a AtomicBool,
    /// Systems that failed to start, by system and queue count, with the reason.
    unavailable: HashMap<(System, usize), String>,
    /// Systems skipped in every case (not installed).
    always_skip: HashMap<System, String>,
    seq: usize,
    progress: Progress,
}

impl<'a> Runner<'a> {
    /// A runner; `total_runs` sizes the progress display.
    pub fn new(
        launcher: &'a Launcher,
        cpus: &'a CpuPlan,
        settings: Settings,
        stop: &'a AtomicBool,
        total_runs: usize,
    ) -> Self {
        Runner {
            launcher,
            cpus,
            settings,
            stop,
            unavailable: HashMap::new(),
            always_skip: HashMap::new(),
            seq: 0,
            progress: Progress::new(total_runs),
        }
    }

    /// Marks `system` as not runnable, so every case skips it with `reason`.
    pub fn skip(&mut self, system: System, reason: String) {
        self.always_skip.insert(system, reason);
    }

    fn skip_reason(&self, system: System, jobs: usize) -> Option<String> {
        self.always_skip
            .get(&system)
            .or_else(|| self.unavailable.get(&(system, jobs)))
            .cloned()
    }

    /// Why systems were skipped, one line each.
    pub fn skipped(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .always_skip
            .iter()
            .map(|(s, why)| format!("{}: {why}", s.id()))
            .chain(
                self.unavailable
                    .iter()
                    .map(|((s, q), why)| format!("{} with {q} queue(s): {why}", s.id())),
            )
            .collect();
        lines.sort();
        lines
    }

    /// Whether the user asked to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Runs the cases in order until the user stops; `show` sees each experiment as it begins
    /// and each case as it completes (the caller presents them).
    pub fn run_cases(&mut self, plan: &[Case], show: &mut dyn FnMut(Shown<'_>)) -> Vec<CaseResult> {
        let mut cases = Vec::new();
        let mut last_experiment = None;
        for case in plan {
            if self.stopped() {
                break;
            }
            if last_experiment != Some(case.experiment) {
                show(Shown::Experiment(case.experiment));
                last_experiment = Some(case.experiment);
            }
            let result = self.run_case(case);
            show(Shown::Case(&result));
            cases.push(result);
        }
        cases
    }

    /// Runs every system of `case` `settings.runs` times, interleaved.
    pub fn run_case(&mut self, case: &Case) -> CaseResult {
        let mut points: Vec<PointResult> =
            case.systems.iter().map(|&s| PointResult::new(s)).collect();
        let mut failed = vec![false; points.len()];
        for round in 0..self.settings.runs {
            for (i, point) in points.iter_mut().enumerate() {
                if self.stopped() {
                    break;
                }
                if failed[i] || self.skip_reason(point.system, case.jobs).is_some() {
                    self.progress.skip();
                    continue;
                }
                self.progress
                    .show(&case.id(), &point.label, round + 1, self.settings.runs);
                let mut attempt = self.run_once(point.system, case, &mut point.warnings);
                if let Err(BenchError::Request(e)) = &attempt {
                    // A stall on a shared machine, or a backend fault: one more try, and the
                    // failure stays on record either way.
                    point
                        .errors
                        .push(format!("run {}: {e} (retried)", round + 1));
                    attempt = self.run_once(point.system, case, &mut point.warnings);
                }
                match attempt {
                    Ok((sample, snapshots)) => {
                        point.runs.push(sample);
                        point.snapshots.extend(snapshots);
                    }
                    Err(BenchError::Interrupted) => break,
                    Err(e @ BenchError::Backend(_)) => {
                        // It did not start: it will not start for the next case either.
                        self.unavailable
                            .insert((point.system, case.jobs), e.to_string());
                        point.errors.push(e.to_string());
                    }
                    Err(e) => {
                        failed[i] = true;
                        point.errors.push(e.to_string());
                    }
                }
            }
        }
        for point in &mut points {
            point.summary = Summary::of(&point.runs);
            if point.runs.is_empty() {
                point.skipped = self.skip_reason(point.system, case.jobs);
            }
        }
        self.progress.clear();
        CaseResult {
            id: case.id(),
            case: case.clone(),
            points,
        }
    }

    fn run_once(
        &mut self,
        system: System,
        case: &Case,
        warnings: &mut Vec<String>,
    ) -> Result<(RunSample, Vec<SnapshotTaken>)> {
        self.seq += 1;
        let mut running = self.launcher.launch(system, case.jobs, self.seq)?;
        let spec = LoadSpec {
            workload: case.workload,
            client: case.client,
            jobs: case.jobs,
            warmup: Duration::from_secs_f64(self.settings.warmup_s),
            measure: Duration::from_secs_f64(self.settings.measure_s),
        };
        let budget = spec.warmup + spec.measure + RUN_SLACK;
        let watchdog = running.watchdog(budget);
        // The client starts measuring `warmup` after it connects, a few milliseconds after
        // this: the first snapshot begins just before the window and the last ends after it.
        let start = Instant::now() + spec.warmup;
        let (launcher, cpus, stop) = (self.launcher, self.cpus, self.stop);
        let snapshot_job = match (system, running.control(), running.target()) {
            (
                System::Vbmq {
                    storage: DiskSetup::Snapshotting,
                    ..
                },
                Some(control),
                Target::VhostUser(socket),
            ) => Some(SnapshotJob {
                vbmq: &launcher.vbmq,
                control,
                socket,
                file: launcher.snapshot_file(),
            }),
            _ => None,
        };
        let (load, snapshots) = thread::scope(|scope| {
            let snapshots = snapshot_job
                .as_ref()
                .map(|job| scope.spawn(move || job.run(start, start + spec.measure, stop)));
            let load = run_load(running.target(), &spec, cpus, running.pid(), stop);
            let snapshots = snapshots.map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Request("snapshot loop panicked".into())))
            });
            (load, snapshots)
        });
        if watchdog.disarm() {
            warnings.push(format!(
                "{}: killed after {budget:?}: the run hung",
                system.id()
            ));
        }
        let backend = running.pid().is_some();
        let tail = running.log_tail();
        if let Some(w) = running.stop() {
            warnings.push(format!("{}: {w}", system.id()));
        }
        let load = load.map_err(|e| match e {
            BenchError::Interrupted => e,
            e if backend => BenchError::Request(format!("{e} (backend output: {tail})")),
            e => e,
        })?;
        let snapshots = snapshots.transpose()?.unwrap_or_default();
        let sample = RunSample::from_load(&load).ok_or_else(|| {
            BenchError::Request("no request completed in the measured window".into())
        })?;
        Ok((sample, snapshots))
    }
}

/// A one-line progress display on a terminal; silent otherwise (logs get the case tables).
struct Progress {
    total: usize,
    done: usize,
    tty: bool,
}

impl Progress {
    fn new(total: usize) -> Self {
        Progress {
            total,
            done: 0,
            tty: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, case: &str, system: &str, round: usize, rounds: usize) {
        self.done += 1;
        if self.tty {
            let pct = 100 * self.done / self.total.max(1);
            eprint!("\r\x1b[K[{pct:3}%] {case}: {system} (run {round}/{rounds})");
            let _ = std::io::stderr().flush();
        }
    }

    fn skip(&mut self) {
        self.done += 1;
    }

    fn clear(&self) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::BackingFile;
    use crate::launcher::find_in_path;
    use crate::systems::WaitMode;
    use crate::workloads::{ClientMode, Experiment, Workload};

    /// Runs bare metal for real, and a "vbmq" that cannot start.
    #[test]
    fn interleaves_runs_and_skips_a_backend_that_cannot_start() {
        let dir = std::env::temp_dir().join(format!("vbmq-runner-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // tmpfs takes O_DIRECT; not every /tmp does.
        let shm = std::path::Path::new("/dev/shm");
        let disk_dir = if shm.is_dir() { shm } else { dir.as_path() };
        let disk_path = disk_dir.join(format!("vbmq-runner-test-{}.raw", std::process::id()));
        let disk = BackingFile::create(&disk_path, 8 << 20).unwrap();
        let cpus = CpuPlan::detect().unwrap();
        let launcher = Launcher {
            vbmq: find_in_path("false").unwrap(),
            qsd: None,
            disk: disk.path().to_path_buf(),
            disk_size: disk.size(),
            run_dir: dir.clone(),
            backend_cpus: cpus.backend.clone(),
        };
        let settings = Settings {
            warmup_s: 0.01,
            measure_s: 0.05,
            runs: 3,
        };
        let stop = AtomicBool::new(false);
        let mut runner = Runner::new(&launcher, &cpus, settings, &stop, 9);
        let case = Case {
            experiment: Experiment::Matrix,
            workload: Workload::randwrite(4),
            client: ClientMode::Polling,
            jobs: 2,
            systems: vec![
                System::BareMetal,
                System::vbmq(WaitMode::Event),
                System::vbmq(WaitMode::Poll),
            ],
        };
        let result = runner.run_case(&case);
        let bare = &result.points[0];
        assert_eq!(bare.runs.len(), 3, "{:?}", bare.errors);
        let summary = bare.summary.as_ref().unwrap();
        assert!(summary.iops.min > 0.0);
        assert!(summary.iops.min <= summary.iops.median && summary.iops.median <= summary.iops.max);
        assert!((summary.mb_s.median - summary.iops.median * 4096.0 / 1e6).abs() < 1e-6);
        let vbmq = &result.points[1];
        assert!(vbmq.runs.is_empty());
        assert!(
            vbmq.skipped
                .as_ref()
                .unwrap()
                .contains("exited before it was ready")
        );
        // Poll mode cannot start either.
        assert!(result.points[2].skipped.is_some());
        assert_eq!(runner.skipped().len(), 2);
        drop(disk);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
