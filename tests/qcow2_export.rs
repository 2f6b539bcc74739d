//! Exports and snapshots of qcow2 disks, against the real `vbmq serve` and images made by
//! `qemu-img`: `export-begin --bitmaps Q` over a qcow2 disk whose checkpoint Q is a bitmap QEMU
//! made and wrote serves the disk at the instant while a libblkio writer never pauses, its
//! `base:allocation` from the image's clusters (and a raw backing file's holes), and
//! `qemu:dirty-bitmap:Q` as QEMU's own NBD server (`qemu-nbd -B`) serves the same bitmap;
//! `ctl snapshot` of a qcow2 disk over a backing file writes the guest's bytes, raw, at one
//! instant, and no snapshot is written into a backing file.

mod common;
#[path = "common/stamp_writer.rs"]
mod stamp_writer;
#[path = "common/stamps.rs"]
mod stamps;

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;

use common::ctl::ctl_json_or_null;
use common::run_time::changed_blocks;
use common::tool::{nbd_uri as uri, qcow2_over, run_tool as run};
use common::{ctl, ctl_json, s, serve_with_control as serve, wait_for};
use serde_json::Value;
use stamp_writer::Writer;
use stamps::{BLOCK, check_one_instant, stamped_image};

const MIB: u64 = 1 << 20;
/// Stamped blocks (16 MiB) at the start of each disk; the disks are 32 MiB.
const BLOCKS: u64 = 4096;
const SIZE: u64 = 32 * MIB;

/// Adjacent ranges merged.
fn merged(ranges: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (offset, len) in ranges {
        match out.last_mut() {
            Some((o, l)) if *o + *l == offset => *l += len,
            _ => out.push((offset, len)),
        }
    }
    out
}

/// The extents of `context` on the export at `socket` whose flags have bit 0 (a hole in
/// `base:allocation`, dirty in a `qemu:dirty-bitmap`), by `nbdinfo --map`.
fn flagged_by_nbdinfo(socket: &Path, context: &str) -> Vec<(u64, u64)> {
    let map = format!("--map={context}");
    let out = run("nbdinfo", &["--json", &map, &uri(socket)]);
    let extents: Value = serde_json::from_str(&out).expect("nbdinfo's JSON");
    let mut covered = 0;
    let mut flagged = Vec::new();
    for e in extents.as_array().expect("a list of extents") {
        let (offset, length) = (e["offset"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        assert_eq!(offset, covered, "extents in order, without gaps: {out}");
        covered += length;
        if e["type"].as_u64().unwrap() & 1 != 0 {
            flagged.push((offset, length));
        }
    }
    assert_eq!(covered, SIZE, "the map covers the export: {out}");
    merged(flagged)
}

/// The extents `qemu-img map` (image options `opts`) says hold no data.
fn holes_by_qemu_img(opts: &str) -> Vec<(u64, u64)> {
    let out = run("qemu-img", &["map", "--output=json", "--image-opts", opts]);
    let extents: Value = serde_json::from_str(&out).expect("qemu-img map's JSON");
    merged(
        extents
            .as_array()
            .expect("a list of extents")
            .iter()
            .filter(|e| e["data"] == false)
            .map(|e| (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap())),
    )
}

/// The dirty extents of bitmap `name` of the NBD export at `socket`, by `qemu-img map` with
/// QEMU's `x-dirty-bitmap` (dirty reads as `"data": false`).
fn dirty_by_qemu_img(socket: &Path, name: &str) -> Vec<(u64, u64)> {
    holes_by_qemu_img(&format!(
        "driver=nbd,server.type=unix,server.path={},x-dirty-bitmap=qemu:dirty-bitmap:{name}",
        s(socket)
    ))
}

/// The same bitmap of the stopped `image` as QEMU's own NBD server exports it.
fn dirty_by_qemu_nbd(dir: &Path, image: &Path, name: &str) -> Vec<(u64, u64)> {
    let socket = dir.join("qemu-nbd.sock");
    let mut nbd = Command::new("qemu-nbd")
        .args([
            "-r",
            "-f",
            "qcow2",
            "-B",
            name,
            "--socket",
            s(&socket),
            s(image),
        ])
        .stderr(Stdio::inherit())
        .spawn()
        .expect("qemu-nbd");
    wait_for(&socket);
    let dirty = dirty_by_qemu_img(&socket, name);
    nbd.kill().unwrap();
    nbd.wait().unwrap();
    dirty
}

/// `qemu-io` commands on the qcow2 `image`.
fn qemu_io(image: &Path, commands: &[&str]) {
    let opts = format!("driver=qcow2,file.filename={}", s(image));
    let mut args = vec!["--image-opts"];
    for command in commands {
        args.extend(["-c", command]);
    }
    args.push(&opts);
    run("qemu-io", &args);
}

/// Checks that the first `BLOCKS` of `backup` are the stamped disk at one instant between the
/// writes `low` and `high`.
fn stamps_at_one_instant(backup: &[u8], dir: &Path, low: u64, high: u64) -> (u64, u64) {
    let stamped = dir.join("stamped-part.raw");
    std::fs::write(&stamped, &backup[..(BLOCKS * BLOCK as u64) as usize]).unwrap();
    let instant = check_one_instant(&stamped, BLOCKS, low, high);
    std::fs::remove_file(&stamped).unwrap();
    instant
}

#[test]
fn a_qcow2_disks_export_serves_the_instant_its_clusters_and_qemus_own_bitmap() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (stamped, image) = (dir.path().join("stamped.raw"), dir.path().join("vm.qcow2"));
    stamped_image(&stamped, BLOCKS);
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            s(&stamped),
            s(&image),
        ],
    );
    run("qemu-img", &["resize", s(&image), "32M"]);
    // QEMU's checkpoint, and writes QEMU makes to it: data at 20M, zeros at 24M.
    run("qemu-img", &["bitmap", "--add", s(&image), "q"]);
    qemu_io(
        &image,
        &[
            "write -P 0x55 20M 64k",
            "write -P 0x66 24M 1M",
            "write -z -u 24M 1M",
        ],
    );
    let holes = vec![
        (16 * MIB, 4 * MIB),
        (20 * MIB + (64 << 10), 12 * MIB - (64 << 10)),
    ];
    let file_opts = format!("driver=qcow2,file.filename={}", s(&image));
    assert_eq!(
        holes_by_qemu_img(&file_opts),
        holes,
        "QEMU's map of the image"
    );
    let (socket, export) = (dir.path().join("vm.sock"), dir.path().join("export.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[format!(
            "socket={},path={},track-changes=on",
            s(&socket),
            s(&image)
        )],
    );
    // A whole generation before the instant: every stamped block is dirty in q.
    let writer = Writer::start(&socket, BLOCKS);
    writer.wait_writes(BLOCKS);
    let address = format!("unix:{}", s(&export));
    let low = writer.done.load(Ordering::SeqCst);
    let answer = ctl_json(
        &control,
        &[
            "export-begin",
            s(&socket),
            &address,
            "--bitmaps",
            "q",
            "--checkpoint",
            "next",
        ],
    );
    let high = writer.started.load(Ordering::SeqCst);
    assert_eq!(answer["bytes"], SIZE, "{answer}");
    // The writer overwrites every stamped block after the instant, each saved first.
    writer.wait_writes(BLOCKS);
    let backup = dir.path().join("backup.raw");
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri(&export),
            s(&backup),
        ],
    );
    let backup = std::fs::read(&backup).unwrap();
    assert_eq!(backup.len() as u64, SIZE);
    let (from, to) = stamps_at_one_instant(&backup, dir.path(), low, high);
    eprintln!("writes started {low}..={high}, the export's instant {from}..={to}");
    let mut tail = vec![0u8; (SIZE - 16 * MIB) as usize];
    tail[(4 * MIB) as usize..(4 * MIB) as usize + (64 << 10)].fill(0x55);
    assert!(
        backup[(16 * MIB) as usize..] == tail[..],
        "QEMU's writes and zeros are served"
    );
    // base:allocation from the clusters; q as QEMU's writes and the writer's left it.
    assert_eq!(flagged_by_nbdinfo(&export, "base:allocation"), holes);
    let dirty = vec![(0, 16 * MIB), (20 * MIB, 64 << 10), (24 * MIB, MIB)];
    assert_eq!(flagged_by_nbdinfo(&export, "qemu:dirty-bitmap:q"), dirty);
    assert_eq!(dirty_by_qemu_img(&export, "q"), dirty);
    ctl_json_or_null(&control, &["export-end", s(&socket), &address]);
    // `next` began at the instant: the writer's later writes, in the stamped blocks only.
    let (_, since) = changed_blocks(&control, &socket, "next");
    assert!(
        !since.is_empty(),
        "the writes after the instant are in next"
    );
    assert!(
        since.iter().all(|&(offset, len)| offset + len <= 16 * MIB),
        "{since:?}"
    );
    writer.stop();
    assert!(daemon.alive());
    assert!(daemon.terminate().success());
    run("qemu-img", &["check", s(&image)]);
    // QEMU's own export of q, vbmq stopped: what vbmq's export served (the writes since were
    // all in blocks q had dirty already).
    assert_eq!(dirty_by_qemu_nbd(dir.path(), &image, "q"), dirty);
}

#[test]
fn a_qcow2_chains_snapshot_is_the_guests_bytes_raw_at_one_instant_and_its_export_has_the_holes() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (base, image) = (dir.path().join("base.raw"), dir.path().join("top.qcow2"));
    // The base: the stamped blocks, then a hole to 32 MiB.
    stamped_image(&base, BLOCKS);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&base)
        .unwrap()
        .set_len(SIZE)
        .unwrap();
    qcow2_over(&image, "raw", "base.raw", &[]);
    // The top: a cluster of data in the base's hole, a zero cluster over another part of it.
    qemu_io(&image, &["write -P 0x77 28M 64k", "write -z 30M 64k"]);
    let chain_opts = format!("driver=qcow2,file.filename={}", s(&image));
    let holes = holes_by_qemu_img(&chain_opts);
    assert_eq!(
        holes,
        vec![
            (16 * MIB, 12 * MIB),
            (28 * MIB + (64 << 10), 4 * MIB - (64 << 10))
        ],
        "QEMU's map of the chain"
    );
    let (socket, other) = (dir.path().join("top.sock"), dir.path().join("other.sock"));
    let other_image = common::image(dir.path(), "other.raw", MIB as usize, 3);
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={}", s(&socket), s(&image)),
            format!("socket={},path={}", s(&other), s(&other_image)),
        ],
    );
    // The chain's files are in use: no disk's snapshot is written into the backing file.
    let base_before = std::fs::read(&base).unwrap();
    let out = ctl(&control, &["snapshot", s(&other), s(&base), "--force"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("a file vbmq uses"), "{stderr}");
    assert!(
        std::fs::read(&base).unwrap() == base_before,
        "the backing file is untouched"
    );
    // The export's map before any write: the chain's holes, as QEMU maps them.
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    ctl_json(&control, &["export-begin", s(&socket), &address]);
    assert_eq!(flagged_by_nbdinfo(&export, "base:allocation"), holes);
    ctl_json_or_null(&control, &["export-end", s(&socket), &address]);
    // Snapshots while the writer fills the top image's clusters from the base.
    let writer = Writer::start(&socket, BLOCKS);
    let mut copied_first = 0;
    for round in 0..2 {
        writer.wait_writes(BLOCKS / 4);
        let file = dir.path().join(format!("snap{round}.raw"));
        let low = writer.done.load(Ordering::SeqCst);
        let answer = ctl_json(&control, &["snapshot", s(&socket), s(&file)]);
        let high = writer.started.load(Ordering::SeqCst);
        assert_eq!(answer["method"], "copy", "{answer}");
        assert_eq!(answer["bytes"], SIZE, "{answer}");
        copied_first += answer["copied_before_write"].as_u64().expect("a count");
        let bytes = std::fs::read(&file).unwrap();
        assert_eq!(bytes.len() as u64, SIZE);
        let (from, to) = stamps_at_one_instant(&bytes, dir.path(), low, high);
        eprintln!(
            "snapshot {round}: {answer}; writes started {low}..={high}, instant {from}..={to}"
        );
        let mut tail = vec![0u8; (SIZE - 16 * MIB) as usize];
        tail[(12 * MIB) as usize..(12 * MIB) as usize + (64 << 10)].fill(0x77);
        assert!(
            bytes[(16 * MIB) as usize..] == tail[..],
            "the top's data over the base's hole"
        );
        std::fs::remove_file(&file).unwrap();
    }
    writer.stop();
    eprintln!("blocks copied before a write: {copied_first}");
    // Quiet: a snapshot is what QEMU reads of the chain once vbmq has stopped.
    let quiet = dir.path().join("quiet.raw");
    ctl_json(&control, &["snapshot", s(&socket), s(&quiet)]);
    assert!(daemon.alive());
    assert!(daemon.terminate().success());
    run("qemu-img", &["check", s(&image)]);
    let by_qemu = dir.path().join("by-qemu.raw");
    run(
        "qemu-img",
        &["convert", "-O", "raw", s(&image), s(&by_qemu)],
    );
    assert!(
        std::fs::read(&quiet).unwrap() == std::fs::read(&by_qemu).unwrap(),
        "the quiet snapshot is the chain as QEMU reads it"
    );
}
