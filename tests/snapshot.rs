//! `vbmq ctl snapshot` against the real, confined `vbmq serve`: snapshots taken while a writer
//! keeps writing generation-stamped blocks must each be the disk at one instant between the
//! command's start and its reply; bad snapshot files are refused and the disk keeps serving; a
//! plain image on XFS is cloned (root only).

mod common;
#[path = "common/stamp_writer.rs"]
mod stamp_writer;
#[path = "common/stamps.rs"]
mod stamps;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;

use common::{Client, ctl, ctl_json, s, serve::serve_one, serve_with_control as serve};
use serde_json::Value;
use stamp_writer::Writer;
use stamps::{BLOCK, check_one_instant, order, stamped_image};

/// Takes snapshots of the disk on `socket` while a writer writes, and checks each. Returns the
/// blocks guest writes had to copy first, over all of them.
fn snapshots_under_load(control: &Path, socket: &Path, dir: &Path, blocks: u64) -> u64 {
    let writer = Writer::start(socket, blocks);
    let mut copied_first = 0;
    for round in 0..3 {
        writer.wait_writes(blocks / 4);
        let file = dir.join(format!("snap{round}.raw"));
        let low = writer.done.load(Ordering::SeqCst);
        let answer = ctl_json(control, &["snapshot", s(socket), s(&file)]);
        let high = writer.started.load(Ordering::SeqCst);
        assert_eq!(answer["method"], "copy", "{answer}");
        assert_eq!(answer["bytes"], blocks * BLOCK as u64, "{answer}");
        copied_first += answer["copied_before_write"].as_u64().expect("a count");
        let (from, to) = check_one_instant(&file, blocks, low, high);
        eprintln!(
            "snapshot {round}: {answer}; writes started {low}..={high}, instant {from}..={to}"
        );
        std::fs::remove_file(&file).unwrap();
    }
    writer.stop();
    copied_first
}

#[test]
fn a_snapshot_under_writes_is_the_disk_at_one_instant_on_tmpfs_and_on_a_thin_disk() {
    // tmpfs: no reflink, copy-before-write by 1 MiB blocks; the thin disk copies by its
    // 64 KiB blocks, read through its map (its base holds generation 0).
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let blocks = 8192; // 32 MiB
    let (image, base, thin) = (
        dir.path().join("a.raw"),
        dir.path().join("base.raw"),
        dir.path().join("thin.raw"),
    );
    stamped_image(&image, blocks);
    stamped_image(&base, blocks);
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={}", s(&a), s(&image)),
            format!("socket={},path={},base={}", s(&b), s(&thin), s(&base)),
        ],
    );
    let copied_a = snapshots_under_load(&control, &a, dir.path(), blocks);
    let copied_b = snapshots_under_load(&control, &b, dir.path(), blocks);
    // The writer went ahead of the copy: writes had to copy first (else this test proved
    // nothing about copy-before-write).
    assert!(
        copied_a > 0,
        "no write met an uncopied block on the file disk"
    );
    assert!(
        copied_b > 0,
        "no write met an uncopied block on the thin disk"
    );
    // Quiet: a snapshot is the disk exactly.
    let file = dir.path().join("quiet.raw");
    ctl_json(&control, &["snapshot", s(&a), s(&file)]);
    assert!(std::fs::read(&file).unwrap() == std::fs::read(&image).unwrap());
    let mut client = Client::connect(&b, 1, false).unwrap();
    let quiet = dir.path().join("quiet-thin.raw");
    ctl_json(&control, &["snapshot", s(&b), s(&quiet)]);
    let snapshot = std::fs::read(&quiet).unwrap();
    for (i, chunk) in snapshot.chunks(1 << 20).enumerate() {
        client.assert_reads(
            0,
            (i << 20) as u64,
            chunk,
            &format!("thin snapshot differs from the disk in MiB {i}"),
        );
    }
    assert!(daemon.alive());
}

/// An incremental backup: snapshot `one` (naming a changed-block map), more writes, snapshot
/// `two`; the extents changed since `one`, copied from two's file over one's, give two's file
/// exactly, though the writer never paused. A name on an untracked disk is refused.
#[test]
fn a_named_snapshot_and_the_blocks_changed_since_it_rebuild_the_next_snapshot() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let blocks = 8192; // 32 MiB, 512 tracked blocks of 64 KiB
    let (image, plain) = (dir.path().join("a.raw"), dir.path().join("p.raw"));
    stamped_image(&image, blocks);
    stamped_image(&plain, 16);
    let (a, p) = (dir.path().join("a.sock"), dir.path().join("p.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={},track-changes=on", s(&a), s(&image)),
            format!("socket={},path={}", s(&p), s(&plain)),
        ],
    );
    let writer = Writer::start(&a, blocks);
    writer.wait_writes(blocks / 4);
    let (one, two) = (dir.path().join("one.raw"), dir.path().join("two.raw"));
    // Writes completed before the map began are not in it; the one in flight may be.
    let first_marked = writer.done.load(Ordering::SeqCst);
    ctl_json(&control, &["snapshot", s(&a), s(&one), "--name", "one"]);
    writer.wait_writes(blocks / 8);
    ctl_json(&control, &["snapshot", s(&a), s(&two), "--name", "two"]);
    let started = writer.started.clone();
    writer.stop();
    // The 64 KiB tracked blocks the writer touched since: the extents may name no other.
    let per_tracked = (64 << 10) / BLOCK as u64;
    let written: std::collections::BTreeSet<u64> = (first_marked..started.load(Ordering::SeqCst))
        .map(|rank| order(blocks, rank % blocks) / per_tracked)
        .collect();
    let changed = ctl_json(&control, &["changed-blocks", s(&a), "--since", "one"]);
    let (mut rebuilt, next) = (std::fs::read(&one).unwrap(), std::fs::read(&two).unwrap());
    assert!(
        rebuilt != next,
        "the writer changed nothing between the snapshots"
    );
    for extent in changed["extents"].as_array().expect("extents") {
        let offset = extent["offset"].as_u64().unwrap() as usize;
        let end = offset + extent["length"].as_u64().unwrap() as usize;
        rebuilt[offset..end].copy_from_slice(&next[offset..end]);
        let tracked = (offset / (64 << 10)) as u64..end.div_ceil(64 << 10) as u64;
        let unwritten: Vec<u64> = tracked.filter(|t| !written.contains(t)).collect();
        assert!(
            unwritten.is_empty(),
            "extents name 64K blocks {unwritten:?} the writer never wrote: the map is not a map"
        );
    }
    let first_wrong = rebuilt
        .chunks(BLOCK)
        .zip(next.chunks(BLOCK))
        .position(|(a, b)| a != b);
    assert_eq!(
        first_wrong, None,
        "a block differs though no extent named it"
    );
    // The name on a disk without track-changes=on: refused, and no file left.
    let unnamed = dir.path().join("p-one.raw");
    let out = ctl(&control, &["snapshot", s(&p), s(&unnamed), "--name", "one"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("track-changes"), "{stderr}");
    assert!(!unnamed.exists());
    assert!(daemon.alive());
}

/// Sends a `snapshot` request for `socket` with `fds` attached; returns the reply.
fn raw_snapshot(control: &Path, socket: &Path, fds: &[i32]) -> Value {
    let body = serde_json::json!({"version": 1, "command": "snapshot", "socket": s(socket)});
    common::control_request(control, &body, fds)
}

#[test]
fn bad_snapshot_files_are_refused_and_the_disk_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let image = common::image(dir.path(), "a.raw", 4 << 20, 5);
    let (mut daemon, control, socket) = serve_one(dir.path(), "a", &image);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let readonly = dir.path().join("ro.raw");
    std::fs::write(&readonly, b"").unwrap();
    let readonly = File::open(&readonly).unwrap();
    let directory = File::open(dir.path()).unwrap();
    let image_rw = File::options().write(true).open(&image).unwrap();
    let (mut pipe_ends, writable) = ([0i32; 2], File::create(dir.path().join("w.raw")).unwrap());
    // SAFETY: pipe2 fills the two descriptors it is given (close-on-exec: no child of another
    // test thread inherits them).
    let piped = unsafe { libc::pipe2(pipe_ends.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(piped, 0);
    let cases: [(&str, Vec<i32>, &str); 6] = [
        ("pipe", vec![pipe_ends[1]], "not a regular file"),
        (
            "directory",
            vec![directory.as_raw_fd()],
            "not a regular file",
        ),
        (
            "read-only",
            vec![readonly.as_raw_fd()],
            "not open for writing",
        ),
        ("none", vec![], "one descriptor"),
        (
            "two",
            vec![writable.as_raw_fd(), writable.as_raw_fd()],
            "one descriptor",
        ),
        ("the image", vec![image_rw.as_raw_fd()], "a file vbmq uses"),
    ];
    for (what, fds, reason) in &cases {
        let reply = raw_snapshot(&control, &socket, fds);
        assert_eq!(reply["ok"], false, "{what}: {reply}");
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.contains(reason), "{what}: {error}");
        // The disk serves on.
        let data = common::pattern(9, 64 << 10);
        assert_eq!(client.write(0, 0, &data), 0, "{what}");
        assert!(client.read(0, 0, data.len()).1 == data, "{what}");
    }
    // SAFETY: closes the pipe made above.
    unsafe {
        libc::close(pipe_ends[0]);
        libc::close(pipe_ends[1]);
    }
    // Other disks' snapshots: a null disk has none; no such disk.
    let out = ctl(
        &control,
        &["snapshot", "/nowhere.sock", s(&dir.path().join("x"))],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no disk on") && err.contains("not a snapshot"),
        "{err}"
    );
    assert!(
        !dir.path().join("x").exists(),
        "a refused snapshot's file is removed"
    );
    // An existing file is not overwritten without --force.
    let kept = dir.path().join("kept.raw");
    std::fs::write(&kept, b"keep").unwrap();
    let out = ctl(&control, &["snapshot", s(&socket), s(&kept)]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&kept).unwrap(), b"keep");
    let answer = ctl_json(&control, &["snapshot", s(&socket), s(&kept), "--force"]);
    assert_eq!(answer["bytes"], 4 << 20);
    assert!(std::fs::read(&kept).unwrap() == std::fs::read(&image).unwrap());
    assert!(daemon.alive());
}

#[test]
fn a_memory_disk_has_no_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("m.sock");
    let (mut daemon, control) = serve(dir.path(), &[format!("socket={},mem=4M", s(&socket))]);
    let file = dir.path().join("m.raw");
    let out = ctl(&control, &["snapshot", s(&socket), s(&file)]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("only path= disks have snapshots"), "{err}");
    assert!(daemon.alive());
}

/// An XFS file system with reflink on a loop device, mounted for the test; unmounted and
/// detached (exactly these) on drop, even when the test fails.
struct Xfs {
    mount: tempfile::TempDir,
    _device: common::loop_device::Loop,
}

impl Xfs {
    fn new(backing: &Path) -> Xfs {
        File::create(backing).unwrap().set_len(512 << 20).unwrap();
        let device = common::loop_device::Loop::attach(backing);
        let mkfs = std::process::Command::new("mkfs.xfs")
            .args(["-q", "-f", "-m", "reflink=1", &device.0])
            .status()
            .expect("mkfs.xfs (xfsprogs)");
        assert!(mkfs.success(), "mkfs.xfs");
        let mount = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .arg(&device.0)
            .arg(mount.path())
            .status()
            .expect("mount");
        assert!(mounted.success(), "mount");
        Xfs {
            mount,
            _device: device,
        }
    }
}

impl Drop for Xfs {
    fn drop(&mut self) {
        common::loop_device::unmount(self.mount.path());
    }
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root for a loop device and mount (scripts/test.sh)"
)]
fn a_plain_image_on_xfs_is_cloned_at_one_instant_under_writes() {
    let dir = tempfile::tempdir().unwrap();
    let xfs = Xfs::new(&dir.path().join("xfs.img"));
    let blocks = 8192;
    let image = xfs.mount.path().join("a.raw");
    stamped_image(&image, blocks);
    let (mut daemon, control, socket) = serve_one(dir.path(), "a", &image);
    let writer = Writer::start(&socket, blocks);
    for round in 0..3 {
        writer.wait_writes(blocks / 4);
        let file = xfs.mount.path().join(format!("snap{round}.raw"));
        let low = writer.done.load(Ordering::SeqCst);
        let answer = ctl_json(&control, &["snapshot", s(&socket), s(&file)]);
        let high = writer.started.load(Ordering::SeqCst);
        assert_eq!(answer["method"], "reflink", "{answer}");
        assert_eq!(answer["bytes"], blocks * BLOCK as u64, "{answer}");
        check_one_instant(&file, blocks, low, high);
        std::fs::remove_file(&file).unwrap();
    }
    writer.stop();
    // Another file system: no clone across them, a copy instead.
    let elsewhere = dir.path().join("copy.raw");
    let answer = ctl_json(&control, &["snapshot", s(&socket), s(&elsewhere)]);
    assert_eq!(answer["method"], "copy", "{answer}");
    assert!(std::fs::read(&elsewhere).unwrap() == std::fs::read(&image).unwrap());
    assert!(daemon.alive());
    drop(daemon);
}

#[test]
fn a_vbmq_killed_mid_copy_leaves_no_file_that_looks_like_a_snapshot() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("big.raw");
    let size: u64 = 512 << 20;
    std::fs::write(&image, vec![0xa5u8; size as usize]).unwrap();
    let (daemon, control, socket) = serve_one(dir.path(), "big", &image);
    let file = dir.path().join("snap.raw");
    let ctl = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("ctl")
        .arg("--control")
        .arg(&control)
        .args(["snapshot", s(&socket), s(&file)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The copy has begun once the file has the disk's size.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) != size {
        assert!(std::time::Instant::now() < deadline, "the copy never began");
        std::thread::yield_now();
    }
    drop(daemon); // SIGKILL
    let out = ctl.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("without a reply"), "{err}");
    assert!(err.contains("is not a snapshot: removed"), "{err}");
    assert!(!file.exists(), "the incomplete file was left");
}
