//! Not tests: the speed of a qcow2 disk against the same data raw, and against
//! qemu-storage-daemon's vhost-user-blk export of the same qcow2 image: 4 KiB random I/O at
//! QD32 on a 256 MiB image in /dev/shm, one queue on CPU 1 for each server, 3 s a case
//! (`VBMQ_QCOW2_SECS`; first writes: one pass over the image, 5 a round), 3 rounds, medians;
//! and random reads through a 3-deep backing chain against the same bytes in one image.
//! Run in release:
//! `cargo test --release --test qcow2_speed -- --ignored --nocapture`.

mod common;

use std::path::Path;
use std::process::Command;

use common::disk_spec;
use common::{Daemon, wait_for};

const SIZE: usize = 256 << 20;

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}");
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// qemu-storage-daemon exporting the qcow2 `image` at `socket` (O_DIRECT, io_uring).
fn qsd(image: &Path, socket: &Path, cpu: &str) -> Daemon {
    let child = Command::new("taskset")
        .args(["-c", cpu, "qemu-storage-daemon"])
        .args([
            "--blockdev",
            &format!(
                "driver=file,node-name=file,filename={},aio=io_uring",
                image.display()
            ),
            "--blockdev",
            "driver=qcow2,node-name=disk,file=file",
            "--export",
            &format!(
                "type=vhost-user-blk,id=e,node-name=disk,addr.type=unix,addr.path={},writable=on",
                socket.display()
            ),
        ])
        .spawn()
        .unwrap();
    wait_for(socket);
    Daemon { child }
}

#[test]
#[ignore]
fn qcow2_speed_against_raw_and_qemu_storage_daemon() {
    let secs: f64 = std::env::var("VBMQ_QCOW2_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let cpu = "1";
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let raw = dir.path().join("data.raw");
    common::large_image(&raw, SIZE, 12);
    let full = dir.path().join("full.qcow2");
    let (raw_s, full_s) = (raw.to_str().unwrap(), full.to_str().unwrap());
    run(
        "qemu-img",
        &["convert", "-f", "raw", "-O", "qcow2", raw_s, full_s],
    );
    let empty_raw = dir.path().join("empty.raw");
    let empty = dir.path().join("empty.qcow2");
    let socket = dir.path().join("s.sock");
    let mut results: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut record = |name: &str, (iops, cpu): (f64, f64)| {
        eprintln!("{name}: {iops:.0} IOPS, {cpu:.1} CPU s per 10^6 I/O");
        match results.iter_mut().find(|r| r.0 == name) {
            Some(r) => {
                r.1.push(iops);
                r.2.push(cpu);
            }
            None => results.push((name.into(), vec![iops], vec![cpu])),
        }
    };
    let vbmq = |path: &Path, write: bool, stride: Option<u64>| {
        let _ = std::fs::remove_file(&socket);
        let spec = disk_spec::with(
            &socket,
            path,
            &format!(",queues=1,cpus={cpu},mode=adaptive"),
        );
        let daemon = Daemon::start(&[spec]);
        common::speed(daemon, &socket, write, (SIZE as u64, secs, stride))
    };
    let fresh = || {
        let _ = std::fs::remove_file(&empty);
        std::fs::File::create(&empty_raw)
            .unwrap()
            .set_len(SIZE as u64)
            .unwrap();
        run(
            "qemu-img",
            &[
                "create",
                "-f",
                "qcow2",
                empty.to_str().unwrap(),
                &SIZE.to_string(),
            ],
        );
    };
    let every_cluster = Some(64 << 10);
    for round in 0..3 {
        eprintln!("round {round}");
        record("raw randread", vbmq(&raw, false, None));
        record("qcow2 randread", vbmq(&full, false, None));
        record("raw randwrite", vbmq(&raw, true, None));
        record("qcow2 randwrite", vbmq(&full, true, None));
        // One pass over the image's 4096 clusters lasts tens of milliseconds: 5 passes a round.
        for _ in 0..5 {
            fresh();
            record(
                "raw first writes, 1 per 64K",
                vbmq(&empty_raw, true, every_cluster),
            );
            record(
                "qcow2 first writes, 1 per 64K",
                vbmq(&empty, true, every_cluster),
            );
        }
        for (name, write) in [("qsd qcow2 randread", false), ("qsd qcow2 randwrite", true)] {
            let _ = std::fs::remove_file(&socket);
            let daemon = qsd(&full, &socket, cpu);
            record(
                name,
                common::speed(daemon, &socket, write, (SIZE as u64, secs, None)),
            );
        }
    }
    eprintln!("| case | IOPS (median of 3; first writes: of 15) | CPU s per 10^6 I/O |");
    eprintln!("|---|---|---|");
    for (name, iops, cpu) in results {
        eprintln!("| {name} | {:.0} | {:.1} |", median(iops), median(cpu));
    }
}

/// A copy of `from` at `to` whose clusters (64 KiB) `i` with `i % 3 == which` hold other bytes.
fn with_third_changed(from: &Path, to: &Path, which: usize, seed: u64) {
    let mut bytes = std::fs::read(from).unwrap();
    let other = common::pattern(seed, 64 << 10);
    for (i, cluster) in bytes.chunks_mut(64 << 10).enumerate() {
        if i % 3 == which {
            cluster.copy_from_slice(&other);
        }
    }
    std::fs::write(to, bytes).unwrap();
}

/// Random 4 KiB reads at QD32 through a 3-deep chain (qcow2 over qcow2 over raw, a third of
/// the clusters in each) against the same bytes in one qcow2 image and raw; goal >= 0.9x the
/// flat image. `VBMQ_CHAIN_SECS` a case (default 3), 3 rounds, medians.
#[test]
#[ignore]
fn chain_reads_against_a_flat_image() {
    let (secs, cpu) = common::speed_settings("CHAIN", 3.0);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = |name: &str| dir.path().join(name);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    common::large_image(&path("base.raw"), SIZE, 21);
    with_third_changed(&path("base.raw"), &path("mid.raw"), 1, 22);
    with_third_changed(&path("mid.raw"), &path("flat.raw"), 2, 23);
    // Each level holds only the clusters that differ from the one below (`convert -B`).
    for (data, image, below, format) in [
        ("mid.raw", "mid.qcow2", "base.raw", "raw"),
        ("flat.raw", "top.qcow2", "mid.qcow2", "qcow2"),
    ] {
        run(
            "qemu-img",
            &[
                "convert",
                "-f",
                "raw",
                "-O",
                "qcow2",
                "-B",
                below,
                "-F",
                format,
                &s(&path(data)),
                &s(&path(image)),
            ],
        );
    }
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            &s(&path("flat.raw")),
            &s(&path("flat.qcow2")),
        ],
    );
    let socket = path("s.sock");
    let vbmq = |image: &Path| {
        let _ = std::fs::remove_file(&socket);
        let spec = format!(
            "socket={},path={},queues=1,cpus={cpu},mode=adaptive",
            socket.display(),
            image.display()
        );
        common::speed(
            Daemon::start(&[spec]),
            &socket,
            false,
            (SIZE as u64, secs, None),
        )
    };
    let cases = ["flat.raw", "flat.qcow2", "top.qcow2"];
    let mut iops: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for round in 0..3 {
        for (case, results) in cases.iter().zip(&mut iops) {
            let (measured, cpu_per) = vbmq(&path(case));
            eprintln!("round {round} {case}: {measured:.0} IOPS, {cpu_per:.1} CPU s per 10^6 I/O");
            results.push(measured);
        }
    }
    let medians: Vec<f64> = iops.into_iter().map(median).collect();
    for (case, m) in cases.iter().zip(&medians) {
        eprintln!("| {case} randread | {m:.0} |");
    }
    eprintln!(
        "3-deep chain against the flat qcow2: {:.2}x (goal >= 0.9x), against raw: {:.2}x",
        medians[2] / medians[1],
        medians[2] / medians[0]
    );
}
