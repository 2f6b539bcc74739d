//! Many VMs on few CPUs (seed 001, SPDK's reactors): four disks of one queue each, all
//! `mode=poll` on one backend CPU in one vbmq process, each driven by its own client at QD8 at
//! once, beside one such disk alone at QD32. The figures: aggregate IOPS against the disk alone,
//! Jain's fairness index over the four, and how many backend threads spin.
//!
//! The four clients are interrupt-driven: four polling clients on one client CPU would take turns
//! by the scheduler's time slice and leave three rings idle at any moment. The disk alone is
//! measured with both kinds of client, and the goal is stated against the better.

use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::client::{LoadSpec, run_load};
use super::cpus::{CpuPlan, pin_to};
use super::error::{BenchError, Result};
use super::runner::Settings;
use super::stats::Stat;
use super::systems::Target;
use super::workloads::{ClientMode, Op, Pattern, Workload};

/// Disks sharing the backend CPU.
const DISKS: usize = 4;

/// Whether `--only TEXT` selects this study.
pub fn selects(text: &str) -> bool {
    "shared-cpu".contains(text) || text.contains("shared-cpu")
}

/// What the study measured (medians over the runs).
#[derive(Debug, Default)]
pub struct SharedCpuResult {
    /// One disk alone at QD32, interrupt-driven client.
    pub alone_iops: Option<f64>,
    /// One disk alone at QD32, polling client.
    pub alone_polling_iops: Option<f64>,
    /// Each of the four disks at QD8, all at once.
    pub per_disk_iops: Vec<f64>,
    /// Backend threads that used more than half a CPU while the four ran.
    pub spinning_threads: Option<usize>,
    /// Why it did not run, if it did not.
    pub error: Option<String>,
}

impl SharedCpuResult {
    /// The four disks' IOPS together.
    pub fn aggregate(&self) -> f64 {
        self.per_disk_iops.iter().sum()
    }

    /// Jain's fairness index: 1 when every disk gets the same share, 1/n when one gets all.
    pub fn fairness(&self) -> Option<f64> {
        let n = self.per_disk_iops.len() as f64;
        let sum: f64 = self.per_disk_iops.iter().sum();
        let squares: f64 = self.per_disk_iops.iter().map(|x| x * x).sum();
        (squares > 0.0).then(|| sum * sum / (n * squares))
    }

    /// The study as text, with its goals.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(error) = &self.error {
            let _ = writeln!(out, "not measured: {error}");
            return out;
        }
        let interrupt = self.alone_iops.unwrap_or(0.0);
        let polling = self.alone_polling_iops.unwrap_or(0.0);
        let _ = writeln!(
            out,
            "one disk alone, QD32, interrupt client: {interrupt:>8.0} IOPS"
        );
        let _ = writeln!(
            out,
            "one disk alone, QD32, polling client:   {polling:>8.0} IOPS"
        );
        let alone = interrupt.max(polling);
        for (disk, iops) in self.per_disk_iops.iter().enumerate() {
            let _ = writeln!(
                out,
                "disk {disk} of {DISKS}, QD8, interrupt client, all at once: {iops:>8.0} IOPS"
            );
        }
        let ratio = if alone > 0.0 {
            self.aggregate() / alone
        } else {
            0.0
        };
        let fairness = self.fairness().unwrap_or(0.0);
        let spinning = self.spinning_threads.map_or("-".into(), |n| n.to_string());
        let met = |ok: bool| if ok { "met" } else { "NOT met" };
        let _ = writeln!(
            out,
            "aggregate {:.0} IOPS = {ratio:.2}x the disk alone, better client (goal >= 0.9x): {}",
            self.aggregate(),
            met(ratio >= 0.9)
        );
        let _ = writeln!(
            out,
            "Jain's fairness index {fairness:.3} (goal >= 0.95): {}",
            met(fairness >= 0.95)
        );
        let _ = writeln!(
            out,
            "backend threads spinning: {spinning} (goal: 1): {}",
            met(self.spinning_threads == Some(1))
        );
        out
    }
}

/// A `vbmq serve` process with `disks` disks of one queue, all polled on `cpu`.
struct Served {
    child: Child,
    sockets: Vec<PathBuf>,
}

impl Served {
    fn start(vbmq: &Path, dir: &Path, disk: &Path, disks: usize, cpu: usize) -> Result<Self> {
        let sockets: Vec<PathBuf> = (0..disks)
            .map(|i| dir.join(format!("shared-cpu-{disks}-{i}.sock")))
            .collect();
        let mut cmd = Command::new(vbmq);
        cmd.arg("serve");
        for socket in &sockets {
            cmd.args([
                "--disk",
                &format!(
                    // One scratch file for all: the disks share it knowingly (no lock).
                    "socket={},path={},queues=1,mode=poll,cpus={cpu},lock=off",
                    socket.display(),
                    disk.display()
                ),
            ]);
        }
        let log = dir.join(format!("shared-cpu-{disks}.log"));
        let log = File::create(&log).map_err(|e| BenchError::io("creating a log", e))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        // SAFETY: setsid and sched_setaffinity are async-signal-safe (see `launcher`).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                pin_to(&[cpu])
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::io("starting vbmq for the shared-CPU study", e))?;
        let served = Served { child, sockets };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !served.sockets.iter().all(|s| s.exists()) {
            if Instant::now() > deadline {
                return Err(BenchError::Backend(
                    "vbmq did not create its sockets".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(served)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe { libc::kill(self.child.id().cast_signed(), libc::SIGTERM) };
        let _ = self.child.wait();
        for socket in &self.sockets {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// CPU ticks of each thread of `pid`.
fn thread_ticks(pid: u32) -> Vec<(u32, u64)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some((tid, ticks))
        })
        .collect()
}

fn randread(iodepth: u32) -> Workload {
    Workload {
        op: Op::Read,
        pattern: Pattern::Random,
        block_size: 4096,
        iodepth,
    }
}

/// Runs the study on the backing file `disk`.
pub fn run(
    vbmq: &Path,
    dir: &Path,
    disk: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> SharedCpuResult {
    match measure(vbmq, dir, disk, cpus, settings, stop) {
        Ok(result) => result,
        Err(e) => SharedCpuResult {
            error: Some(e.to_string()),
            ..SharedCpuResult::default()
        },
    }
}

fn measure(
    vbmq: &Path,
    dir: &Path,
    disk: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> Result<SharedCpuResult> {
    let cpu = cpus.backend[0];
    let spec = |iodepth, client| LoadSpec {
        workload: randread(iodepth),
        client,
        jobs: 1,
        warmup: Duration::from_secs_f64(settings.warmup_s),
        measure: Duration::from_secs_f64(settings.measure_s),
    };
    let mut alone = Vec::new();
    let mut alone_polling = Vec::new();
    let mut shared: Vec<Vec<f64>> = vec![Vec::new(); DISKS];
    let mut spinning = Vec::new();
    for _ in 0..settings.runs {
        // Interleaved: the disk alone, then the four together.
        let one = Served::start(vbmq, dir, disk, 1, cpu)?;
        let target = Target::VhostUser(one.sockets[0].clone());
        let pid = Some(one.child.id());
        let load = run_load(&target, &spec(32, ClientMode::Interrupt), cpus, pid, stop)?;
        alone.push(load.ios as f64 / load.seconds);
        let load = run_load(&target, &spec(32, ClientMode::Polling), cpus, pid, stop)?;
        alone_polling.push(load.ios as f64 / load.seconds);
        drop(one);

        let four = Served::start(vbmq, dir, disk, DISKS, cpu)?;
        let pid = four.child.id();
        let results = std::thread::scope(|scope| {
            let loads: Vec<_> = four
                .sockets
                .iter()
                .map(|socket| {
                    let target = Target::VhostUser(socket.clone());
                    let spec = spec(8, ClientMode::Interrupt);
                    scope.spawn(move || run_load(&target, &spec, cpus, Some(pid), stop))
                })
                .collect();
            // Halfway through the measured window: which threads spin.
            std::thread::sleep(Duration::from_secs_f64(
                settings.warmup_s + settings.measure_s / 4.0,
            ));
            let before = thread_ticks(pid);
            std::thread::sleep(Duration::from_secs_f64(settings.measure_s / 2.0));
            let after = thread_ticks(pid);
            // SAFETY: sysconf has no memory-safety effect.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
            let half = hz * settings.measure_s / 4.0;
            let busy = after
                .iter()
                .filter(|(tid, ticks)| {
                    let was = before.iter().find(|(t, _)| t == tid).map_or(0, |(_, t)| *t);
                    (ticks - was) as f64 > half
                })
                .count();
            let loads: Vec<_> = loads
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BenchError::Request("client thread panicked".into()))
                    })
                })
                .collect();
            (loads, busy)
        });
        let (loads, busy) = results;
        for (disk, load) in loads.into_iter().enumerate() {
            let load = load?;
            shared[disk].push(load.ios as f64 / load.seconds);
        }
        spinning.push(busy);
    }
    let median = |values: &[f64]| Stat::of(values).map(|s| s.median);
    spinning.sort_unstable();
    Ok(SharedCpuResult {
        alone_iops: median(&alone),
        alone_polling_iops: median(&alone_polling),
        per_disk_iops: shared.iter().filter_map(|runs| median(runs)).collect(),
        spinning_threads: spinning.get(spinning.len() / 2).copied(),
        error: None,
    })
}
