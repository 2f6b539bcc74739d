//! Disks on Ceph RBD: vbmq's `rbd=` engine beside qemu-storage-daemon's `rbd` driver (its
//! iothread setup) and `rbd bench` (librbd alone, the ceiling), on one image of a throwaway
//! single-node cluster, same client and CPUs. On a small machine the OSD and monitor share the
//! CPUs with everything else: the runs are interleaved and each system's CPU is shown.
//!
//! vbmq runs `mode=event`: librbd delivers completions on an eventfd anyway, and a polling
//! thread would take CPU from the OSD on a small machine (BENCHMARKS.md has both modes).
//!
//! Runs when asked for (`--only rbd`) or in a full run, if the Ceph daemons are installed
//! (scripts/deps/ceph.sh; qemu-storage-daemon's rbd driver is Debian's qemu-block-extra).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::backend_process::BackendProcess;
use super::ceph_cluster::Cluster;
use super::client::{LoadSpec, run_load};
use super::cpus::CpuPlan;
use super::error::Result;
use super::launcher::find_in_path;
use super::runner::Settings;
use super::stats::Stat;
use super::systems::Target;
use super::workloads::{ClientMode, Workload};

/// Whether `--only TEXT` selects this study.
pub fn selects(text: &str) -> bool {
    "rbd".contains(text) || text.contains("rbd")
}

/// Why the study cannot run here, if it cannot.
pub fn missing() -> Option<String> {
    [
        "ceph-mon",
        "ceph-osd",
        "rbd",
        "ceph-authtool",
        "monmaptool",
        "uuidgen",
    ]
    .iter()
    .find(|tool| find_in_path(tool).is_none())
    .map(|tool| format!("{tool} is not installed (scripts/deps/ceph.sh)"))
}

/// The cases: what is measured, by which figure.
const CASES: [(&str, Workload, bool); 3] = [
    ("randread 4K QD32 IOPS", Workload::randread(32), false),
    ("randwrite 4K QD32 IOPS", Workload::randwrite(32), false),
    ("randread 4K QD1 p50 us", Workload::randread(1), true),
];

/// `rbd bench` alone: the same operation, size, pattern and thread count; its ops/sec.
fn rbd_bench(cluster: &Cluster, write: bool, threads: u32) -> f64 {
    let out = cluster.rbd(&[
        "bench",
        "--io-type",
        if write { "write" } else { "read" },
        "--io-size",
        "4096",
        "--io-threads",
        &threads.to_string(),
        "--io-pattern",
        "rand",
        "--io-total",
        "48M",
        "rbd/bench",
    ]);
    // The summary: "elapsed: 3   ops: 12288   ops/sec: 4050.23   bytes/sec: ..."
    out.lines()
        .rev()
        .find_map(|line| {
            let (_, rest) = line.split_once("ops/sec:")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0.0)
}

/// Runs the study; returns its text (the table and the goals), or why it did not run.
pub fn run(
    vbmq: &Path,
    dir: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> String {
    if let Some(why) = missing() {
        return format!("not measured: {why}\n");
    }
    let cluster = match std::panic::catch_unwind(Cluster::start) {
        Ok(cluster) => cluster,
        Err(_) => return "not measured: the single-node Ceph cluster did not start\n".into(),
    };
    match measure(&cluster, vbmq, dir, cpus, settings, stop) {
        Ok(text) => text,
        Err(e) => format!("not measured: {e}\n"),
    }
}

/// Makes the 256 MiB image `rbd/bench`, written once all through: reads of objects never
/// written would not reach the OSD.
fn create_filled_image(cluster: &Cluster) {
    cluster.create_image("bench", 256 << 20);
    cluster.rbd(&[
        "bench",
        "--io-type",
        "write",
        "--io-size",
        "4M",
        "--io-pattern",
        "seq",
        "--io-total",
        "256M",
        "rbd/bench",
    ]);
}

/// Writes a case's row: the medians of vbmq's, qsd's and `rbd bench`'s runs, their ratios and
/// vbmq's and qsd's CPU use.
fn write_row(out: &mut String, name: &str, figures: [&[f64]; 3], cpu: [&[f64]; 2]) {
    let median = |v: &[f64]| Stat::of(v).map(|s| s.median);
    let [a, b, c] = figures.map(median);
    let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}%", v * 100.0));
    let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
        (Some(x), Some(y)) if y > 0.0 => format!("{:.2}x", x / y),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "{name:<24} {:>10} {:>10} {:>10}  {:>8}  {:>14}  {:>8} {:>8}",
        show(a),
        show(b),
        show(c),
        ratio(a, b),
        ratio(a, c),
        pct(median(cpu[0])),
        pct(median(cpu[1]))
    );
}

fn measure(
    cluster: &Cluster,
    vbmq: &Path,
    dir: &Path,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> Result<String> {
    create_filled_image(cluster);
    let conf = cluster.conf().display().to_string();
    let qsd = find_in_path("qemu-storage-daemon");
    let vbmq_socket = dir.join("rbd-vbmq.sock");
    let qsd_socket = dir.join("rbd-qsd.sock");
    let backend_cpus = cpus.backend.clone();
    let cpu_list = backend_cpus
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let start_vbmq = || {
        let mut cmd = Command::new(vbmq);
        cmd.args([
            "serve",
            "--disk",
            &format!(
                "socket={},rbd=rbd/bench,ceph-conf={conf},queues=1,mode=event,cpus={}",
                vbmq_socket.display(),
                backend_cpus[0]
            ),
        ]);
        BackendProcess::start(cmd, &vbmq_socket, &backend_cpus)
    };
    let start_qsd = |qsd: &Path| {
        let mut cmd = Command::new(qsd);
        cmd.args([
            "--blockdev",
            &format!("driver=rbd,node-name=disk0,pool=rbd,image=bench,conf={conf},user=admin"),
            "--object",
            "iothread,id=iot0",
            "--export",
            &format!(
                "type=vhost-user-blk,id=exp0,node-name=disk0,addr.type=unix,addr.path={},\
                 writable=on,num-queues=1,iothread=iot0",
                qsd_socket.display()
            ),
        ]);
        BackendProcess::start(cmd, &qsd_socket, &backend_cpus)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "backend CPUs {cpu_list}; the OSD and monitor run unpinned beside them; interrupt-driven \
         client; medians of {} interleaved runs",
        settings.runs
    );
    let _ = writeln!(
        out,
        "{:<24} {:>10} {:>10} {:>10}  vbmq/qsd  vbmq/rbd-bench  vbmq CPU  qsd CPU",
        "case", "vbmq", "qsd rbd", "rbd bench"
    );
    for (name, workload, latency) in CASES {
        let spec = LoadSpec {
            workload,
            client: ClientMode::Interrupt,
            jobs: 1,
            warmup: Duration::from_secs_f64(settings.warmup_s),
            measure: Duration::from_secs_f64(settings.measure_s),
        };
        // One run against `socket`: its figure, and the backend's share of a CPU.
        let measure_one = |socket: &Path, backend: &BackendProcess| -> Result<(f64, f64)> {
            let target = Target::VhostUser(socket.to_path_buf());
            let load = run_load(&target, &spec, cpus, Some(backend.pid()), stop)?;
            let cpu = load.backend_cpu_seconds.unwrap_or(0.0) / load.seconds;
            let value = if latency {
                load.latency.quantile_us(0.5).unwrap_or(0.0)
            } else {
                load.ios as f64 / load.seconds
            };
            Ok((value, cpu))
        };
        let (mut ours, mut theirs, mut ceiling) = (Vec::new(), Vec::new(), Vec::new());
        let (mut our_cpu, mut their_cpu) = (Vec::new(), Vec::new());
        for _ in 0..settings.runs {
            let backend = start_vbmq()?;
            let (value, cpu) = measure_one(&vbmq_socket, &backend)?;
            ours.push(value);
            our_cpu.push(cpu);
            drop(backend);
            if let Some(qsd) = &qsd {
                let backend = start_qsd(qsd)?;
                let (value, cpu) = measure_one(&qsd_socket, &backend)?;
                theirs.push(value);
                their_cpu.push(cpu);
            }
            if !latency {
                let write = workload.op == super::workloads::Op::Write;
                ceiling.push(rbd_bench(cluster, write, workload.iodepth));
            }
        }
        write_row(
            &mut out,
            name,
            [&ours, &theirs, &ceiling],
            [&our_cpu, &their_cpu],
        );
    }
    let _ = writeln!(
        out,
        "goals: QD32 >= 1.0x qsd and >= 0.9x rbd bench; QD1 p50 <= 0.8x qsd"
    );
    Ok(out)
}
