//! `vbmq bench`: vbmq beside bare metal and qemu-storage-daemon on this machine.
//!
//! Every system is driven by the same client (libblkio), on the same random-filled file on tmpfs,
//! with the same CPUs: the client on one set, the backend on the other. Each figure is a median
//! of interleaved runs, so the ratios between systems hold on a noisy shared machine even when
//! absolute figures drift. The method is in `BENCHMARKS.md`.

mod backend_process;
mod bare;
mod cache_study;
mod calibrate;
pub mod ceph_cluster;
mod client;
mod cpus;
mod disk;
mod error;
mod fs_study;
mod goals;
mod histogram;
mod launcher;
mod load;
mod options;
mod rbd_study;
mod report;
mod rng;
mod runner;
mod running;
mod shared_cpu_study;
mod snapshot_study;
mod snapshots;
mod stat;
mod stats;
mod sync_client;
mod systems;
mod workloads;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cpus::{CpuPlan, pin_to};
use disk::BackingFile;
use error::{BenchError, Result};
use launcher::{Launcher, find_in_path};
pub use options::Options;
use report::Report;
use runner::{Runner, Settings};
use systems::System;

/// Size of the backing file and of the null devices.
const DISK_BYTES: u64 = 1 << 30;

/// Set by SIGINT/SIGTERM: finish the current run, write what was measured, clean up.
static STOP: AtomicBool = AtomicBool::new(false);

/// Runs `vbmq bench`; returns the exit code.
pub fn run(opts: &Options) -> i32 {
    match bench(opts) {
        Ok(true) => 0,
        Ok(false) => 130,
        Err(e @ BenchError::Usage(_)) => {
            eprintln!("vbmq bench: {e}");
            2
        }
        Err(e) => {
            eprintln!("vbmq bench: {e}");
            1
        }
    }
}

/// Returns whether the benchmark ran to the end (false: interrupted, partial report written).
fn bench(opts: &Options) -> Result<bool> {
    let cpus = CpuPlan::detect()?;
    let settings = Settings::new(opts.quick);
    let plan = selected_plan(opts, &cpus)?;
    let (date, stamp) = report::utc_now();
    let out = out_dir(opts, &stamp)?;

    let command = command_line(opts);
    println!("{command}: {cpus}");
    // The harness' own thread stays off the backend CPUs; client threads pin themselves.
    pin_to(&cpus.client).map_err(|e| BenchError::io("pinning the client", e))?;

    let handover = measure_handover(&cpus, &settings);

    let vbmq = std::env::current_exe().map_err(|e| BenchError::io("finding vbmq itself", e))?;
    let qsd = find_in_path("qemu-storage-daemon");
    let scratch = Scratch::create()?;
    let disk_path = disk_location(scratch.path());
    println!(
        "creating {} MiB random-filled disk {}",
        DISK_BYTES >> 20,
        disk_path.display()
    );
    // Before the disk exists: from here on Ctrl-C lets the cleanup run.
    install_signal_handlers();
    let disk = BackingFile::create(&disk_path, DISK_BYTES)?;

    let launcher = Launcher {
        vbmq,
        qsd: qsd.clone(),
        disk: disk.path().to_path_buf(),
        disk_size: disk.size(),
        run_dir: scratch.path().to_path_buf(),
        backend_cpus: cpus.backend.clone(),
    };
    let total_runs = plan.iter().map(|c| c.systems.len()).sum::<usize>() * settings.runs;
    let mut runner = Runner::new(&launcher, &cpus, settings, &STOP, total_runs);
    if qsd.is_none() {
        skip_qsd(&mut runner);
    }
    println!(
        "{} cases, {} runs of {} s each (+{} s warm-up); medians of {}\n",
        plan.len(),
        total_runs,
        settings.measure_s,
        settings.warmup_s,
        settings.runs
    );

    let load_before = load_average_noted(&cpus);
    let mut cases = runner.run_cases(&plan, &mut show);
    let complete = !runner.stopped();
    let skipped = runner.skipped();
    drop(runner);
    launcher.remove_thin_disks();
    let study = if complete {
        cache_study::run(
            &launcher,
            &cpus,
            settings,
            opts.quick,
            opts.only.as_deref(),
            &STOP,
            &mut show,
        )?
    } else {
        cache_study::StudyResult::default()
    };
    let studies_measured = complete && run_studies(opts, &launcher, &cpus, settings, &out)?;
    let complete = complete && !STOP.load(Ordering::Relaxed);
    cases.extend(study.cases);
    let mut skipped = skipped;
    skipped.extend(study.skipped);
    let cache_hit_ratios = study.hit_ratios;
    print_hit_ratios(&cache_hit_ratios);
    // Floors are minima: measure again now and keep the lower of each, since other work on
    // the machine can only have slowed a hand-over down.
    let handover = match (handover, measure_handover(&cpus, &settings)) {
        (Some(a), Some(b)) => Some(a.min(&b)),
        (a, b) => a.or(b),
    };
    let goals = goals::evaluate(&cases, handover.as_ref());
    println!("== Goals (ratios of medians measured in this run)");
    println!("{}", report::table::goals_text(&goals));

    let report = Report {
        command,
        date_utc: date,
        quick: opts.quick,
        machine: report::Machine::detect(qsd.as_deref()),
        cpus,
        settings,
        disk_bytes: disk.size(),
        load_average: [load_before, report::load_average()],
        handover,
        skipped,
        cases,
        goals,
        cache_hit_ratios,
        complete,
    };
    drop(disk);
    report::write(&out, &report)?;
    println!("report: {}", out.join("report.md").display());
    let measured = report
        .cases
        .iter()
        .any(|c| c.points.iter().any(|p| !p.runs.is_empty()));
    if complete && !measured && !studies_measured {
        return Err(BenchError::Backend(
            "no system could be measured: see the errors in the report".into(),
        ));
    }
    Ok(complete)
}

/// The cases to measure: all of the plan, or those `--only` selects (refused when it selects
/// neither a case nor a study).
fn selected_plan(opts: &Options, cpus: &CpuPlan) -> Result<Vec<workloads::Case>> {
    let plan = workloads::plan(opts.quick, cpus.total());
    let Some(text) = &opts.only else {
        return Ok(plan);
    };
    let plan = workloads::filter(plan, text);
    if plan.is_empty()
        && !cache_study::selects(opts.quick, text)
        && !shared_cpu_study::selects(text)
        && !rbd_study::selects(text)
        && !fs_study::selects(text)
    {
        return Err(BenchError::Usage(format!(
            "--only {text}: no case or system matches"
        )));
    }
    Ok(plan)
}

/// Runs the studies `--only` selects after the cases (Ceph's only in a full run or when asked
/// for), each printing its text and writing it to `out`; returns whether any measured anything.
fn run_studies(
    opts: &Options,
    launcher: &Launcher,
    cpus: &CpuPlan,
    settings: Settings,
    out: &Path,
) -> Result<bool> {
    let only = opts.only.as_deref();
    let going = || !STOP.load(Ordering::Relaxed);
    let mut measured = false;
    if only.is_none_or(shared_cpu_study::selects) && going() {
        println!(
            "== Many disks on one CPU: {} one-queue disks, mode=poll, one backend CPU",
            4
        );
        let shared = shared_cpu_study::run(
            &launcher.vbmq,
            &launcher.run_dir,
            &launcher.disk,
            cpus,
            settings,
            &STOP,
        );
        measured = shared.error.is_none();
        save_study(out, "shared-cpu.txt", &shared.text())?;
    }
    if only.is_none_or(snapshot_study::selects) && going() {
        println!("== Snapshot of a quiet disk against the host's cp --sparse=always");
        let text = snapshot_study::run(launcher, cpus, settings, &STOP);
        launcher.remove_thin_disks();
        measured |= save_study(out, "snapshot.txt", &text)?;
    }
    // Ceph's daemons are started only for a full run or when asked for: not in --quick.
    let run_rbd = only.map_or(!opts.quick, rbd_study::selects);
    if run_rbd && going() {
        println!(
            "== Disks on Ceph RBD: vbmq rbd= beside qemu-storage-daemon's rbd driver and rbd bench"
        );
        let text = rbd_study::run(&launcher.vbmq, &launcher.run_dir, cpus, settings, &STOP);
        measured |= save_study(out, "rbd.txt", &text)?;
    }
    if only.is_none_or(fs_study::selects) && going() {
        println!(
            "== Files (virtio-fs): vbmq --fs beside virtiofsd and the host's pread, one user-space \
             client"
        );
        let text = fs_study::run(&launcher.vbmq, &launcher.run_dir, cpus, settings, &STOP);
        measured |= save_study(out, "fs.txt", &text)?;
    }
    Ok(measured)
}

/// Prints a study's text and writes it to `name` in `out`; returns whether it measured
/// anything.
fn save_study(out: &Path, name: &str, text: &str) -> Result<bool> {
    println!("{text}");
    let path = out.join(name);
    fs::write(&path, text).map_err(|e| BenchError::io(format!("writing {}", path.display()), e))?;
    Ok(!text.starts_with("not measured"))
}

/// The load average now, with a note when other work is running.
fn load_average_noted(cpus: &CpuPlan) -> Option<f64> {
    let load = report::load_average();
    if let Some(load) = load.filter(|&l| l > cpus.total() as f64) {
        println!(
            "note: load average {load:.1} on {} CPUs: other work is running, figures will be noisy",
            cpus.total()
        );
    }
    load
}

/// The report's directory, made: `--out`, or `vbmq-bench-STAMP`.
fn out_dir(opts: &Options, stamp: &str) -> Result<PathBuf> {
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("vbmq-bench-{stamp}")));
    fs::create_dir_all(&out)
        .map_err(|e| BenchError::io(format!("creating {}", out.display()), e))?;
    Ok(out)
}

/// Skips the systems qemu-storage-daemon runs, and says so.
fn skip_qsd(runner: &mut Runner) {
    println!(
        "qemu-storage-daemon not found: skipping Baseline, VBDP, null-co and \
         qsd cache.direct=off \
         (scripts/deps/bench.sh installs it)"
    );
    for s in [
        System::QsdBaseline,
        System::QsdVbdp,
        System::QsdNull,
        System::QsdPageCache,
    ] {
        runner.skip(s, "qemu-storage-daemon is not installed".into());
    }
}

/// Prints the cache study's hit ratios.
fn print_hit_ratios(ratios: &[cache_study::HitRatio]) {
    for h in ratios {
        match h.ratio {
            Some(r) => println!(
                "cache hit ratio, {} in {}: {:.1}%",
                h.system,
                h.case,
                r * 100.0
            ),
            None => println!("cache hit ratio, {} in {}: not measured", h.system, h.case),
        }
    }
}

/// The machine's floors, printed; `None` (and a line saying why) if they cannot be measured.
fn measure_handover(cpus: &CpuPlan, settings: &Settings) -> Option<calibrate::Handover> {
    let (a, b) = (cpus.client[0], cpus.backend[0]);
    let time = Duration::from_secs_f64(settings.measure_s / 2.0);
    match calibrate::handover(a, b, time) {
        Ok(h) => {
            println!(
                "CPU {a} -> CPU {b} hand-over, one way: wake-up {:.1} us, polled cache line \
                 {:.2} us",
                h.wakeup_p50_us, h.spin_p50_us
            );
            Some(h)
        }
        Err(e) => {
            println!("hand-over calibration failed: {e}");
            None
        }
    }
}

/// Prints what the runner measures as it goes: a heading per experiment, a table per case.
fn show(shown: runner::Shown<'_>) {
    match shown {
        runner::Shown::Experiment(experiment) => println!("== {}", experiment.title()),
        runner::Shown::Case(result) => {
            println!("-- {}", report::table::case_title(result));
            println!("{}", report::table::case_text(result));
        }
    }
}

/// The command as the user would type it again (without `--out`, which does not change what
/// is measured).
fn command_line(opts: &Options) -> String {
    let mut cmd = String::from("vbmq bench");
    if opts.quick {
        cmd.push_str(" --quick");
    }
    if let Some(only) = &opts.only {
        cmd.push_str(&format!(" --only {only}"));
    }
    cmd
}

/// tmpfs if there is one (it takes O_DIRECT and stands in for a very fast device).
fn disk_location(scratch: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(format!("vbmq-bench-{}.raw", std::process::id()))
    } else {
        scratch.join("disk.raw")
    }
}

/// A private directory for sockets and backend logs, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn create() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("vbmq-bench-{}", std::process::id()));
        fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io(format!("creating {}", dir.display()), e))?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Ctrl-C or SIGTERM stops the benchmark between requests instead of killing it, so the disk
/// file is removed and a partial report is written.
fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is valid; the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}
