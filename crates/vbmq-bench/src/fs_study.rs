//! Files, not blocks (seed 001's file-level path): a vbmq `--fs` share beside virtiofsd and the
//! host's own `pread`/`fstatat`, on one directory on tmpfs (its files are page cache: "cached"
//! files). No guest runs fast here, so both backends are driven by the same user-space virtio-fs
//! client (`vbmq_driver::FsClient`: FUSE over vhost-user, as the guest's driver sends it), one
//! request queue, the client on the client CPU and the backend pinned to the backend CPU.
//!
//! virtiofsd runs as its documentation describes, `--cache auto`, twice: with its default
//! (`--thread-pool-size 0`: requests served on the queue thread) and with a pool of 64 threads
//! (the old default); its better figure is the reference. Runs are interleaved; medians.
//!
//! Beside vbmq's defaults, rows that each differ from another by one security layer, as a start
//! can get it: a share served without a mount of its own (vbmq without `CAP_SYS_ADMIN`: the
//! containment check walks `..` chains), and `vbmq virtiofsd` with and without its seccomp
//! filter. The goals compare the defaults only.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::ROOT_ID;

use super::backend_process::BackendProcess;
use super::cpus::{CpuPlan, pin_to};
use super::error::{BenchError, Result};
use super::launcher::find_in_path;
use super::rng::Rng;
use super::runner::Settings;
use super::stats::Stat;

/// Whether `--only TEXT` selects this study.
pub fn selects(text: &str) -> bool {
    "fs".contains(text) || text.contains("fs") || text.contains("virtiofsd")
}

const FILE_BYTES: u64 = 256 << 20;
const SMALL_FILES: usize = 1000;
const BLOCK: u64 = 4096;
const FILE_BLOCKS: u64 = FILE_BYTES / BLOCK;

/// The shared directory: one large random-filled file and many small ones, removed on drop.
struct SharedDir(PathBuf);

impl SharedDir {
    fn create(base: &Path) -> Result<Self> {
        let dir = base.join(format!("vbmq-bench-fs-{}", std::process::id()));
        let io = |what: &str, e| BenchError::io(format!("{what} {}", dir.display()), e);
        std::fs::create_dir_all(dir.join("small")).map_err(|e| io("creating", e))?;
        let mut rng = Rng::new(0xf11e);
        let mut data = vec![0u8; FILE_BYTES as usize];
        rng.fill(&mut data);
        std::fs::write(dir.join("data"), &data).map_err(|e| io("filling", e))?;
        for i in 0..SMALL_FILES {
            std::fs::write(dir.join(format!("small/f{i}")), [i as u8; 64])
                .map_err(|e| io("filling", e))?;
        }
        Ok(SharedDir(dir))
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one run measured.
#[derive(Clone, Copy, Default)]
struct Figures {
    qd32_iops: f64,
    qd1_p50_us: f64,
    metadata_ops: f64,
}

fn client_error(e: std::io::Error) -> BenchError {
    BenchError::Backend(format!("virtio-fs client: {e}"))
}

/// Random 4 KiB reads with `depth` in flight for `time`; IOPS and the p50 latency (QD1 only).
///
/// The client stays light, so that the backend is what is measured: each slot's chain is framed
/// once and only its request is written again, the requests of one reap are made available
/// together, and the clock is read per request only at QD1 (a guest's driver does all this work
/// on its own vCPU, not on the one the backend's figure depends on).
fn random_reads(
    client: &mut FsClient,
    node: u64,
    fh: u64,
    depth: u16,
    time: Duration,
) -> Result<(f64, f64)> {
    let mut rng = Rng::new(0x5eed);
    let blocks = FILE_BLOCKS;
    let timed = depth == 1;
    let mut submitted_at = vec![Instant::now(); usize::from(depth)];
    let mut latencies = Vec::new();
    for slot in 0..depth {
        let request = client.read_request(node, fh, rng.below(blocks) * BLOCK, BLOCK as u32);
        client
            .submit(slot, &request, 16 + BLOCK as u32)
            .map_err(client_error)?;
    }
    client.kick().map_err(client_error)?;
    let start = Instant::now();
    let mut done = Vec::new();
    let mut again = Vec::with_capacity(usize::from(depth));
    let mut completed = 0u64;
    let mut last_progress = start;
    let mut now = start;
    while now.duration_since(start) < time {
        done.clear();
        client.reap(&mut done);
        now = Instant::now();
        if done.is_empty() {
            if now.duration_since(last_progress) > Duration::from_secs(5) {
                return Err(BenchError::Backend(
                    "virtio-fs reads stopped completing".into(),
                ));
            }
            std::hint::spin_loop();
            continue;
        }
        last_progress = now;
        again.clear();
        for &(slot, written) in &done {
            if written != 16 + BLOCK as u32 {
                return Err(BenchError::Backend(format!(
                    "a 4 KiB read returned {written} bytes"
                )));
            }
            if timed {
                latencies.push(
                    now.duration_since(submitted_at[usize::from(slot)])
                        .as_secs_f64()
                        * 1e6,
                );
            }
            completed += 1;
            let request = client.read_request(node, fh, rng.below(blocks) * BLOCK, BLOCK as u32);
            client.rewrite(slot, &request).map_err(client_error)?;
            again.push(slot);
        }
        if timed {
            submitted_at[usize::from(again[0])] = Instant::now();
        }
        client.offer(&again);
        client.kick().map_err(client_error)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    // The reads still in flight complete before the client is dropped.
    let mut left = usize::from(depth);
    let deadline = Instant::now() + Duration::from_secs(5);
    while left > 0 && Instant::now() < deadline {
        done.clear();
        client.reap(&mut done);
        left -= done.len().min(left);
    }
    let p50 = Stat::of(&latencies).map_or(0.0, |s| s.median);
    Ok((completed as f64 / seconds, p50))
}

/// LOOKUP then GETATTR of the small files in turn, one at a time, for `time`: pairs per second.
fn metadata(client: &mut FsClient, dir: u64, time: Duration) -> Result<f64> {
    let start = Instant::now();
    let mut pairs = 0u64;
    let mut looked_up = vec![0u64; SMALL_FILES];
    let mut nodes = vec![0u64; SMALL_FILES];
    while start.elapsed() < time {
        let i = pairs as usize % SMALL_FILES;
        let entry = client.lookup(dir, &format!("f{i}")).map_err(client_error)?;
        client.getattr(entry.nodeid).map_err(client_error)?;
        nodes[i] = entry.nodeid;
        looked_up[i] += 1;
        pairs += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    for (node, count) in nodes.iter().zip(looked_up) {
        if count > 0 {
            client.forget(*node, count).map_err(client_error)?;
        }
    }
    Ok(pairs as f64 / seconds)
}

/// All three figures against the backend on `socket`.
fn measure_backend(socket: &Path, settings: Settings) -> Result<Figures> {
    let mut client = FsClient::connect(socket).map_err(client_error)?;
    let entry = client.lookup(ROOT_ID, "data").map_err(client_error)?;
    let fh = client
        .open(entry.nodeid, libc::O_RDONLY as u32)
        .map_err(client_error)?;
    let warmup = Duration::from_secs_f64(settings.warmup_s);
    let time = Duration::from_secs_f64(settings.measure_s);
    random_reads(&mut client, entry.nodeid, fh, 32, warmup)?;
    let (qd32_iops, _) = random_reads(&mut client, entry.nodeid, fh, 32, time)?;
    let (_, qd1_p50_us) = random_reads(&mut client, entry.nodeid, fh, 1, time)?;
    client.release(entry.nodeid, fh).map_err(client_error)?;
    let small = client.lookup(ROOT_ID, "small").map_err(client_error)?;
    let metadata_ops = metadata(&mut client, small.nodeid, time)?;
    Ok(Figures {
        qd32_iops,
        qd1_p50_us,
        metadata_ops,
    })
}

/// The host's own: `pread` of 4 KiB at random offsets, and `fstatat` of the small files by name
/// (one call for a LOOKUP and GETATTR pair), on the backend CPU.
fn measure_host(dir: &Path, cpus: &CpuPlan, settings: Settings) -> Result<Figures> {
    let dir = dir.to_path_buf();
    let backend_cpus = cpus.backend.clone();
    let time = Duration::from_secs_f64(settings.measure_s);
    let thread = std::thread::spawn(move || -> std::io::Result<Figures> {
        pin_to(&backend_cpus)?;
        let file = std::fs::File::open(dir.join("data"))?;
        let mut rng = Rng::new(0x5eed);
        let mut buf = vec![0u8; BLOCK as usize];
        let mut latencies = Vec::new();
        let start = Instant::now();
        let mut reads = 0u64;
        while start.elapsed() < time {
            let offset = rng.below(FILE_BYTES / BLOCK) * BLOCK;
            let t = Instant::now();
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, offset)?;
            latencies.push(t.elapsed().as_secs_f64() * 1e6);
            reads += 1;
        }
        let iops = reads as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut stats = 0u64;
        while start.elapsed() < time {
            let i = stats as usize % SMALL_FILES;
            std::fs::symlink_metadata(dir.join(format!("small/f{i}")))?.ino();
            stats += 1;
        }
        Ok(Figures {
            qd32_iops: iops,
            qd1_p50_us: Stat::of(&latencies).map_or(0.0, |s| s.median),
            metadata_ops: stats as f64 / start.elapsed().as_secs_f64(),
        })
    });
    thread
        .join()
        .map_err(|_| BenchError::Backend("the host loop panicked".into()))?
        .map_err(|e| BenchError::io("the host loop", e))
}

/// Runs the study; returns its text (the table and the goals), or why it did not run.
pub fn run(
    vbmq: &Path,
    run_dir: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> String {
    match measure(vbmq, run_dir, cpus, settings, stop) {
        Ok(text) => text,
        Err(e) => format!("not measured: {e}\n"),
    }
}

fn measure(
    vbmq: &Path,
    run_dir: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> Result<String> {
    let base = Path::new("/dev/shm");
    let shared = SharedDir::create(if base.is_dir() { base } else { run_dir })?;
    let virtiofsd = find_in_path("virtiofsd");
    let backend_cpu = cpus.backend[0];
    let socket = run_dir.join("fs.sock");
    let share = shared.0.display().to_string();
    let vbmq_cmd = |mode: &str| {
        let mut cmd = Command::new(vbmq);
        cmd.args([
            "serve",
            "--fs",
            &format!(
                "socket={},dir={share},tag=bench,queues=1,mode={mode},cpus={backend_cpu}",
                socket.display()
            ),
        ]);
        cmd
    };
    let virtiofsd_cmd = |path: &Path, pool: u32| {
        let mut cmd = Command::new(path);
        cmd.arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={share}"))
            .args(["--cache=auto", "--sandbox=none"])
            .arg(format!("--thread-pool-size={pool}"));
        cmd
    };
    // `vbmq virtiofsd`, with the seccomp filter it installs by default or none.
    let vbmq_virtiofsd = |seccomp: &str| {
        let mut cmd = Command::new(vbmq);
        cmd.arg("virtiofsd")
            .arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={share}"))
            .arg(format!("--seccomp={seccomp}"))
            .args(["--mode=poll", "--queues=1"])
            .arg(format!("--cpus={backend_cpu}"));
        cmd
    };
    let mut systems: Vec<(String, Box<dyn Fn() -> Command>)> = vec![
        ("vbmq poll".into(), Box::new(|| vbmq_cmd("poll"))),
        ("vbmq adaptive".into(), Box::new(|| vbmq_cmd("adaptive"))),
    ];
    let ours = 0..systems.len();
    // The security layers' cost, beside the defaults: each pair differs by one layer.
    systems.push((
        "vbmq poll, no mount".into(),
        Box::new(|| without_own_mount(vbmq_cmd("poll"))),
    ));
    systems.push(("vbmq virtiofsd".into(), Box::new(|| vbmq_virtiofsd("kill"))));
    systems.push((
        "vbmq virtiofsd, no seccomp".into(),
        Box::new(|| vbmq_virtiofsd("none")),
    ));
    let theirs_from = systems.len();
    let mut missing = None;
    match &virtiofsd {
        Some(path) => {
            for pool in [0, 64] {
                let path = path.clone();
                systems.push((
                    format!("virtiofsd pool={pool}"),
                    Box::new(move || virtiofsd_cmd(&path, pool)),
                ));
            }
        }
        None => missing = Some("virtiofsd is not installed (scripts/deps/bench.sh)"),
    }
    let mut results: Vec<Vec<Figures>> = vec![Vec::new(); systems.len() + 1];
    for _ in 0..settings.runs {
        for (i, (_, command)) in systems.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let backend = BackendProcess::start(command(), &socket, &cpus.backend)?;
            results[i].push(measure_backend(backend.socket(), settings)?);
        }
        results[systems.len()].push(measure_host(&shared.0, cpus, settings)?);
    }
    let names: Vec<String> = systems
        .iter()
        .map(|(name, _)| name.clone())
        .chain(["host pread/fstatat".to_string()])
        .collect();
    Ok(report(
        &names,
        &results,
        missing,
        cpus,
        settings,
        ours,
        theirs_from,
    ))
}

/// The table of `results` (a row per system in `names`, the host's last) and the goals' ratios:
/// vbmq's better mode against virtiofsd's better pool and the host.
fn report(
    names: &[String],
    results: &[Vec<Figures>],
    missing: Option<&str>,
    cpus: &CpuPlan,
    settings: Settings,
    ours: std::ops::Range<usize>,
    theirs_from: usize,
) -> String {
    let median = |i: usize, f: fn(&Figures) -> f64| {
        Stat::of(&results[i].iter().map(f).collect::<Vec<_>>()).map(|s| s.median)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backend CPU {}, client CPU {}; one request queue; a {} MiB file and {SMALL_FILES} \
         small files on tmpfs; medians of {} interleaved runs of {} s",
        cpus.backend[0],
        cpus.client[0],
        FILE_BYTES >> 20,
        settings.runs,
        settings.measure_s
    );
    if let Some(why) = missing {
        let _ = writeln!(out, "virtiofsd not measured: {why}");
    }
    let _ = writeln!(
        out,
        "{:<26} {:>16} {:>16} {:>22}",
        "system", "4K QD32 IOPS", "4K QD1 p50 us", "LOOKUP+GETATTR pairs/s"
    );
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "{name:<26} {:>16} {:>16} {:>22}",
            show(median(i, |f| f.qd32_iops)),
            show(median(i, |f| f.qd1_p50_us)),
            show(median(i, |f| f.metadata_ops))
        );
    }
    let best = |rows: std::ops::Range<usize>, f: fn(&Figures) -> f64, lower: bool| {
        rows.filter_map(|i| median(i, f))
            .reduce(|a, b| if lower { a.min(b) } else { a.max(b) })
    };
    let host_row = names.len() - 1;
    let theirs = theirs_from..host_row;
    let host = host_row..names.len();
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let qd32 = |r: std::ops::Range<usize>| best(r, |f| f.qd32_iops, false);
    let qd1 = |r: std::ops::Range<usize>| best(r, |f| f.qd1_p50_us, true);
    let meta = |r: std::ops::Range<usize>| best(r, |f| f.metadata_ops, false);
    let _ = writeln!(
        out,
        "goals: QD32 {} virtiofsd (>= 2x), {} host pread (>= 0.9x); QD1 p50 {} virtiofsd \
         (<= 0.5x); LOOKUP+GETATTR {} virtiofsd (>= 2x)",
        ratio(qd32(ours.clone()), qd32(theirs.clone())),
        ratio(qd32(ours.clone()), qd32(host)),
        ratio(qd1(ours.clone()), qd1(theirs.clone())),
        ratio(meta(ours), meta(theirs)),
    );
    out
}

/// `linux/capability.h` (libc names no capability).
const CAP_SYS_ADMIN: libc::c_ulong = 21;

/// `cmd` run without `CAP_SYS_ADMIN` (as an unprivileged vbmq): its share is served from its
/// directory, not from a mount of its own, and the containment check walks `..` chains.
fn without_own_mount(mut cmd: Command) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl in the child before exec; no allocation, no lock.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}
