//! Seed 003's cache placement study: 4 KiB random reads served from DRAM by a cache at each
//! place it can sit, against the host's own page cache (bare metal) read by its best engine:
//! io_uring and `pread` both run, and the better in each case is the reference (`bare`).
//!
//! Seed 003 found a hit in a hypervisor-side cache reaching the guest at 3% of a guest page-cache
//! hit's throughput, because every hit still travelled the virtual I/O path. vbmq's `cache=`
//! serves a hit with one copy on the queue's thread; this study measures how close that comes.
//! Two working sets: the whole disk fits in the cache (every read a hit), and the disk is four
//! times the cache (most reads miss; the hit ratio is measured and reported).
//!
//! The study has its own, smaller disk: the DRAM systems copy the whole disk into fresh memory
//! at start (`mem=` with `image=`, `cache=` with `cache-preload=on`), and first touching 1 GiB
//! takes seconds on a virtual machine whose host backs its memory lazily.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::thread;
use std::time::Duration;

use serde::Serialize;

use super::client::{LoadSpec, run_load};
use super::cpus::CpuPlan;
use super::disk::BackingFile;
use super::error::Result;
use super::launcher::Launcher;
use super::runner::{Runner, Settings, Shown};
use super::stats::CaseResult;
use super::systems::{DiskSetup, System, WaitMode};
use super::workloads::{Case, ClientMode, Experiment, Workload, filter};

/// Size of the study's disk.
pub const DISK_BYTES: u64 = 256 << 20;

/// `cache=` for the working set that fits: twice the disk.
pub const FITS_PERCENT: u16 = 200;
/// `cache=` for the working set that does not fit: a quarter of the disk.
pub const SPILL_PERCENT: u16 = 25;

/// vbmq with a cache of `percent` of the disk, its I/O thread in `mode`.
pub const fn cached(percent: u16, mode: WaitMode) -> System {
    System::vbmq_on(DiskSetup::Cache { percent }, mode)
}

/// The study's cases: every read a hit ([`Experiment::Cache`]), and a working set four times
/// the cache ([`Experiment::CacheSpill`]).
fn cases(quick: bool) -> Vec<Case> {
    let workloads: &[Workload] = if quick {
        &[Workload::randread(32)]
    } else {
        &[Workload::randread(1), Workload::randread(32)]
    };
    let mem = System::vbmq_on(DiskSetup::Memory, WaitMode::Poll);
    let page_cache = System::vbmq_on(DiskSetup::PageCache, WaitMode::Poll);
    // The host's page-cache reads by each engine: the goals take the better (`bare::best`).
    let host = [System::BareMetalPageCache, System::BareMetalPageCachePsync];
    let fits: Vec<System> = if quick {
        [
            &host[..],
            &[
                cached(FITS_PERCENT, WaitMode::Adaptive),
                cached(FITS_PERCENT, WaitMode::Poll),
                mem,
            ],
        ]
        .concat()
    } else {
        [
            &host[..],
            &[
                cached(FITS_PERCENT, WaitMode::Adaptive),
                cached(FITS_PERCENT, WaitMode::Poll),
                mem,
                System::vbmq_on(DiskSetup::Memory, WaitMode::Adaptive),
                page_cache,
                System::QsdPageCache,
            ],
        ]
        .concat()
    };
    let spill: Vec<System> = if quick {
        [&host[..], &[cached(SPILL_PERCENT, WaitMode::Adaptive)]].concat()
    } else {
        [
            &host[..],
            &[
                cached(SPILL_PERCENT, WaitMode::Adaptive),
                cached(SPILL_PERCENT, WaitMode::Poll),
                page_cache,
                System::QsdPageCache,
            ],
        ]
        .concat()
    };
    let mut out = Vec::new();
    for (experiment, systems) in [(Experiment::Cache, fits), (Experiment::CacheSpill, spill)] {
        for &workload in workloads {
            out.push(Case {
                experiment,
                workload,
                client: ClientMode::Polling,
                jobs: 1,
                systems: systems.clone(),
            });
        }
    }
    out
}

/// The report's note on [`Experiment::Cache`].
pub const FITS_NOTE: &str = "The cache placement study runs on a 256 MiB random-filled tmpfs \
    file of its own (not the 1 GiB one): the DRAM systems copy the whole disk into fresh memory \
    at start. Every read hits DRAM. vbmq `cache=` (twice the disk, filled at \
    start with `cache-preload=on`) copies each hit from its own cache into the guest's buffer on \
    the queue's thread; `mem=` serves a copy of the disk loaded into its memory (`image=`); bare \
    metal (page cache) reads the tmpfs file without O_DIRECT, through io_uring and through \
    `pread` (psync), and the better of the two is the goals' reference; vbmq `direct=off` and \
    qemu-storage-daemon `cache.direct=off` read it through the host page cache.";

/// The report's note on [`Experiment::CacheSpill`].
pub const SPILL_NOTE: &str = "The disk is four times vbmq's cache (`cache=` a quarter of the \
    disk): uniform random reads hit about a quarter of the time and the rest read the file with \
    O_DIRECT and fill the cache, evicting. The page-cache systems still hold the whole tmpfs \
    file. On this kernel every io_uring read of a tmpfs file is handed to an io-wq worker \
    thread, which shares the backend CPU with a polling I/O thread: misses (and every \
    `direct=off` read) pay for that. Hit ratios below are from an extra run of each cached \
    system, over its measured window.";

/// What the study measured.
#[derive(Debug, Default)]
pub struct StudyResult {
    /// Every case with every run.
    pub cases: Vec<CaseResult>,
    /// The cached systems' hit ratios.
    pub hit_ratios: Vec<HitRatio>,
    /// Systems not run, and why.
    pub skipped: Vec<String>,
}

/// Runs the study (the cases `only` selects, if given) on a disk of its own next to the
/// benchmark's, with `template`'s executables and CPUs.
pub fn run(
    template: &Launcher,
    cpus: &CpuPlan,
    settings: Settings,
    quick: bool,
    only: Option<&str>,
    stop: &AtomicBool,
    show: &mut dyn FnMut(Shown<'_>),
) -> Result<StudyResult> {
    let mut plan = cases(quick);
    if let Some(text) = only {
        plan = filter(plan, text);
    }
    if plan.is_empty() {
        return Ok(StudyResult::default());
    }
    let dir = template.disk.parent().unwrap_or(Path::new("/tmp"));
    let path = dir.join(format!("vbmq-cache-study-{}.raw", std::process::id()));
    println!(
        "creating {} MiB random-filled disk {} for the cache study",
        DISK_BYTES >> 20,
        path.display()
    );
    let disk = BackingFile::create(&path, DISK_BYTES)?;
    let launcher = Launcher {
        vbmq: template.vbmq.clone(),
        qsd: template.qsd.clone(),
        disk: disk.path().to_path_buf(),
        disk_size: disk.size(),
        run_dir: template.run_dir.clone(),
        backend_cpus: template.backend_cpus.clone(),
    };
    let total = plan.iter().map(|c| c.systems.len()).sum::<usize>() * settings.runs;
    let mut runner = Runner::new(&launcher, cpus, settings, stop, total);
    if launcher.qsd.is_none() {
        runner.skip(
            System::QsdPageCache,
            "qemu-storage-daemon is not installed".into(),
        );
    }
    let mut result = StudyResult {
        cases: runner.run_cases(&plan, show),
        ..StudyResult::default()
    };
    let stopped = runner.stopped();
    result.skipped = runner.skipped();
    drop(runner);
    if !stopped {
        result.hit_ratios = hit_ratios(&launcher, cpus, settings, &plan, stop);
    }
    Ok(result)
}

/// Whether `--only text` selects any of the study's cases.
pub fn selects(quick: bool, text: &str) -> bool {
    !filter(cases(quick), text).is_empty()
}

/// A cached system's hit ratio in one case.
#[derive(Clone, Debug, Serialize)]
pub struct HitRatio {
    /// The case identifier.
    pub case: String,
    /// The system identifier.
    pub system: String,
    /// Bytes served from the cache over bytes read, in the measured window.
    pub ratio: Option<f64>,
    /// Why it could not be measured.
    pub error: Option<String>,
}

/// Runs each cached system of `cases` once more and reads its cache statistics (SIGUSR1) when
/// measuring starts and ends.
fn hit_ratios(
    launcher: &Launcher,
    cpus: &CpuPlan,
    settings: Settings,
    cases: &[Case],
    stop: &AtomicBool,
) -> Vec<HitRatio> {
    let mut out = Vec::new();
    for (seq, (case, system)) in cases
        .iter()
        .flat_map(|c| c.systems.iter().map(move |s| (c, *s)))
        .filter(|(_, s)| {
            matches!(
                s,
                System::Vbmq {
                    storage: DiskSetup::Cache { .. },
                    ..
                }
            )
        })
        .enumerate()
    {
        let (ratio, error) = match hit_ratio(launcher, cpus, settings, case, system, seq, stop) {
            Ok(ratio) => (Some(ratio), None),
            Err(e) => (None, Some(e)),
        };
        out.push(HitRatio {
            case: case.id(),
            system: system.id(),
            ratio,
            error,
        });
    }
    out
}

fn hit_ratio(
    launcher: &Launcher,
    cpus: &CpuPlan,
    settings: Settings,
    case: &Case,
    system: System,
    seq: usize,
    stop: &AtomicBool,
) -> std::result::Result<f64, String> {
    let mut running = launcher
        .launch(system, case.jobs, 100_000 + seq)
        .map_err(|e| e.to_string())?;
    let pid = running.pid().ok_or("no backend process")?;
    let spec = LoadSpec {
        workload: case.workload,
        client: case.client,
        jobs: case.jobs,
        warmup: Duration::from_secs_f64(settings.warmup_s),
        measure: Duration::from_secs_f64(settings.measure_s),
    };
    let warmup = spec.warmup;
    let load = thread::scope(|scope| {
        scope.spawn(move || {
            thread::sleep(warmup);
            signal_stats(pid);
        });
        run_load(running.target(), &spec, cpus, Some(pid), stop)
    });
    signal_stats(pid);
    thread::sleep(Duration::from_millis(200));
    let tail = running.log_tail();
    running.stop();
    load.map_err(|e| e.to_string())?;
    let samples = parse_stats(&tail);
    let [.., start, end] = samples.as_slice() else {
        return Err(format!("no statistics in the backend's output: {tail}"));
    };
    let (hit, miss) = (end.0 - start.0, end.1 - start.1);
    if hit + miss == 0 {
        return Err("no reads in the measured window".into());
    }
    Ok(hit as f64 / (hit + miss) as f64)
}

/// Asks vbmq to print its statistics.
fn signal_stats(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory-safety preconditions; `pid` is the running backend, our
        // own child, not reaped before `Running::stop`.
        unsafe { libc::kill(pid, libc::SIGUSR1) };
    }
}

/// Every (cache_hit_bytes, cache_miss_bytes) pair in vbmq's statistics lines, in order.
fn parse_stats(text: &str) -> Vec<(u64, u64)> {
    let value = |line: &str, key: &str| {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(key)?.parse::<u64>().ok())
    };
    text.split(" / ")
        .flat_map(str::lines)
        .filter_map(|line| {
            Some((
                value(line, "cache_hit_bytes=")?,
                value(line, "cache_miss_bytes=")?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_statistics_lines() {
        let tail = "vbmq: statistics /s.sock: [queue 0: x] cache_hits=3 cache_hit_bytes=100 \
                    cache_miss_bytes=300 / vbmq: statistics /s.sock: cache_hit_bytes=400 \
                    cache_miss_bytes=400";
        assert_eq!(parse_stats(tail), vec![(100, 300), (400, 400)]);
        assert!(parse_stats("no output").is_empty());
    }

    #[test]
    fn the_note_gives_the_disk_size() {
        assert!(FITS_NOTE.contains(&format!("{} MiB", DISK_BYTES >> 20)));
    }

    #[test]
    fn both_working_sets_compare_with_every_host_engine() {
        for quick in [true, false] {
            let cases = cases(quick);
            for e in [Experiment::Cache, Experiment::CacheSpill] {
                let case = cases.iter().find(|c| c.experiment == e).unwrap();
                let engines = crate::bare::engines(System::BareMetalPageCache).unwrap();
                assert_eq!(case.systems[..2], engines);
            }
        }
    }
}
