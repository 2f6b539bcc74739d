//! `track-changes=on` on a qcow2 disk keeps its checkpoints as the image's persistent dirty
//! bitmaps: images made by `qemu-img`, written through `qemu-io` and the real `vbmq`, the
//! bitmaps read back by QEMU (`qemu-img info`, `qemu-nbd`'s `qemu:dirty-bitmap:NAME`,
//! `qemu-img bitmap --merge`) and by vbmq (`ctl changed-blocks`); `kill -9` leaves them in use
//! (invalid to both); `qemu-img check` clean throughout.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::run_time::{changed_blocks, checkpoint, no_extents};
use common::serve::refused_at_start;
use common::tool::run_tool as run;
use common::{Client, Daemon, serve_with_control, wait_for};
use serde_json::Value;

const BLOCK: u64 = 64 << 10;

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn create(dir: &Path) -> PathBuf {
    let image = dir.join("vm.qcow2");
    run("qemu-img", &["create", "-f", "qcow2", s(&image), "4M"]);
    image
}

fn spec(dir: &Path, image: &Path) -> String {
    format!(
        "socket={},path={},track-changes=on",
        dir.join("vm.sock").display(),
        image.display()
    )
}

fn serve(dir: &Path, image: &Path) -> (Daemon, PathBuf, Client) {
    let (daemon, control) = serve_with_control(dir, &[spec(dir, image)]);
    let client = Client::connect(&dir.join("vm.sock"), 1, false).unwrap();
    (daemon, control, client)
}

/// The image's bitmaps as `qemu-img info` lists them: name and flags.
fn qemu_bitmaps(image: &Path) -> Vec<(String, Vec<String>)> {
    let info: Value =
        serde_json::from_str(&run("qemu-img", &["info", "-U", "--output=json", s(image)])).unwrap();
    info["format-specific"]["data"]["bitmaps"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|b| {
                    let flags = b["flags"].as_array().unwrap();
                    let flags = flags.iter().map(|f| f.as_str().unwrap().into()).collect();
                    (b["name"].as_str().unwrap().to_string(), flags)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The dirty extents of bitmap `name` as QEMU serves them: `qemu-nbd -B NAME`, read by
/// `qemu-img map` through `x-dirty-bitmap` (dirty shows as `"data": false`).
fn qemu_dirty(dir: &Path, image: &Path, name: &str) -> Vec<(u64, u64)> {
    let socket = dir.join(format!("nbd-{name}.sock"));
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
        .unwrap();
    wait_for(&socket);
    let opts = format!(
        "driver=nbd,server.type=unix,server.path={},x-dirty-bitmap=qemu:dirty-bitmap:{name}",
        socket.display()
    );
    let map = run("qemu-img", &["map", "--output=json", "--image-opts", &opts]);
    nbd.kill().unwrap();
    nbd.wait().unwrap();
    let map: Value = serde_json::from_str(&map).unwrap();
    let mut dirty: Vec<(u64, u64)> = Vec::new();
    for e in map.as_array().unwrap() {
        if e["data"].as_bool().unwrap() {
            continue;
        }
        let (start, len) = (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        match dirty.last_mut() {
            Some(last) if last.0 + last.1 == start => last.1 += len,
            _ => dirty.push((start, len)),
        }
    }
    dirty
}

/// `qemu-img check`: 0, clean (a killed vbmq's image lock goes a little after it is reaped).
fn qemu_check(image: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = Command::new("qemu-img")
            .args(["check", s(image)])
            .output()
            .unwrap();
        let locked = String::from_utf8_lossy(&out.stderr).contains("Failed to lock");
        if !locked || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        out.status.code(),
        Some(0),
        "qemu-img check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn extents(control: &Path, dir: &Path, name: &str) -> Vec<(u64, u64)> {
    let (answer, extents) = changed_blocks(control, &dir.join("vm.sock"), name);
    assert_eq!(answer["block_size"], BLOCK);
    extents
}

#[test]
fn checkpoints_are_bitmaps_qemu_reads_with_the_same_extents() {
    let dir = tempfile::tempdir().unwrap();
    let image = create(dir.path());
    let socket = dir.path().join("vm.sock");
    let (daemon, control, mut client) = serve(dir.path(), &image);
    assert_eq!(client.write(0, 30 * BLOCK, &[7; 4096]), 0); // before any checkpoint
    checkpoint(&control, &socket, "a");
    assert_eq!(client.write(0, BLOCK, &[1; 4096]), 0); // block 1
    assert_eq!(client.write(0, 3 * BLOCK - 4096, &[2; 8192]), 0); // blocks 2 and 3
    assert_eq!(client.write_zeroes(0, 10 * BLOCK, BLOCK, true), 0); // block 10
    checkpoint(&control, &socket, "b");
    assert_eq!(client.write(0, 40 * BLOCK + 512, &[3; 512]), 0); // block 40
    assert_eq!(client.flush(0), 0);
    let a = vec![(BLOCK, 3 * BLOCK), (10 * BLOCK, BLOCK), (40 * BLOCK, BLOCK)];
    let b = vec![(40 * BLOCK, BLOCK)];
    assert_eq!(extents(&control, dir.path(), "a"), a);
    assert_eq!(extents(&control, dir.path(), "b"), b);
    assert!(
        !dir.path().join("vm.qcow2.changes").exists(),
        "kept in the image"
    );
    // While served: none in the image yet, or each in use.
    for (name, flags) in qemu_bitmaps(&image) {
        assert!(flags.contains(&"in-use".to_string()), "{name}: {flags:?}");
    }
    drop(client);
    assert!(daemon.terminate().success());
    // Stopped cleanly: QEMU lists them, enabled, not in use, with the same extents.
    let auto = vec!["auto".to_string()];
    assert_eq!(
        qemu_bitmaps(&image),
        vec![("a".to_string(), auto.clone()), ("b".to_string(), auto)]
    );
    assert_eq!(qemu_dirty(dir.path(), &image, "a"), a);
    assert_eq!(qemu_dirty(dir.path(), &image, "b"), b);
    qemu_check(&image);
    // qemu-img merges them.
    run("qemu-img", &["bitmap", "--add", s(&image), "m"]);
    run("qemu-img", &["bitmap", "--merge", "b", s(&image), "m"]);
    assert_eq!(qemu_dirty(dir.path(), &image, "m"), b);
    // A clean restart: vbmq reads them back (and QEMU's "m"), and adds to them.
    let (daemon, control, mut client) = serve(dir.path(), &image);
    assert_eq!(extents(&control, dir.path(), "a"), a);
    assert_eq!(extents(&control, dir.path(), "m"), b);
    // While served, every bitmap is in use in the image: a crash now leaves them invalid.
    let served = qemu_bitmaps(&image);
    assert_eq!(served.len(), 3);
    for (name, flags) in served {
        assert!(flags.contains(&"in-use".to_string()), "{name}: {flags:?}");
    }
    assert_eq!(client.write(0, 63 * BLOCK, &[5; 4096]), 0);
    ok_forget(&control, &socket, "m");
    drop(client);
    assert!(daemon.terminate().success());
    let mut a2 = a.clone();
    a2.push((63 * BLOCK, BLOCK));
    assert_eq!(qemu_dirty(dir.path(), &image, "a"), a2);
    assert_eq!(qemu_bitmaps(&image).len(), 2, "m forgotten");
    qemu_check(&image);
}

fn ok_forget(control: &Path, socket: &Path, name: &str) {
    common::ctl::ok(&common::ctl(
        control,
        &["forget-checkpoint", s(socket), name],
    ));
}

#[test]
fn a_bitmap_qemu_wrote_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let image = create(dir.path());
    // Granularity 4 KiB, unlike vbmq's default: vbmq serves at the image's own.
    run(
        "qemu-img",
        &["bitmap", "--add", "-g", "4096", s(&image), "q"],
    );
    let opts = format!("driver=qcow2,file.filename={}", image.display());
    run(
        "qemu-io",
        &[
            "--image-opts",
            "-c",
            "write 8k 4k",
            "-c",
            "write 1M 12k",
            &opts,
        ],
    );
    let q = vec![(8192, 4096), (1 << 20, 12288)];
    assert_eq!(qemu_dirty(dir.path(), &image, "q"), q);
    let socket = dir.path().join("vm.sock");
    let (daemon, control, mut client) = serve(dir.path(), &image);
    let (answer, got) = changed_blocks(&control, &socket, "q");
    assert_eq!(answer["block_size"], 4096);
    assert_eq!(got, q);
    assert_eq!(client.write(0, 2 << 20, &[9; 4096]), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let mut q2 = q.clone();
    q2.push((2 << 20, 4096));
    assert_eq!(qemu_dirty(dir.path(), &image, "q"), q2);
    qemu_check(&image);
}

#[test]
fn kill_9_leaves_the_bitmaps_in_use_and_invalid_to_both() {
    let dir = tempfile::tempdir().unwrap();
    let image = create(dir.path());
    let socket = dir.path().join("vm.sock");
    let (daemon, control, mut client) = serve(dir.path(), &image);
    checkpoint(&control, &socket, "a");
    assert_eq!(client.write(0, 0, &[1; 4096]), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let (mut daemon, control, mut client) = serve(dir.path(), &image);
    assert_eq!(extents(&control, dir.path(), "a"), vec![(0, BLOCK)]);
    assert_eq!(client.write(0, 5 * BLOCK, &[2; 4096]), 0);
    assert_eq!(client.flush(0), 0);
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(client);
    qemu_check(&image);
    assert_eq!(
        qemu_bitmaps(&image),
        vec![(
            "a".to_string(),
            vec!["in-use".to_string(), "auto".to_string()]
        )]
    );
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&control);
    let (daemon, control, client) = serve(dir.path(), &image);
    let err = no_extents(&control, &socket, "a");
    assert!(err.contains("in use"), "{err}");
    // A new checkpoint beside it is valid; the invalid one stays in use in the image.
    checkpoint(&control, &socket, "c");
    drop(client);
    assert!(daemon.terminate().success());
    let flags: Vec<_> = qemu_bitmaps(&image);
    assert_eq!(flags.len(), 2);
    assert!(flags[0].1.contains(&"in-use".to_string()), "{flags:?}");
    assert_eq!(flags[1], ("c".to_string(), vec!["auto".to_string()]));
    qemu_check(&image);
}

/// Where the image's bitmaps extension data lies.
fn bitmaps_extension(image: &Path) -> u64 {
    let header = std::fs::read(image).unwrap();
    let mut at = u32::from_be_bytes(header[100..104].try_into().unwrap()) as usize;
    loop {
        let kind = u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
        let len = u32::from_be_bytes(header[at + 4..at + 8].try_into().unwrap()) as usize;
        assert_ne!(kind, 0, "no bitmaps extension");
        if kind == 0x2385_2875 {
            return at as u64 + 8;
        }
        at += 8 + len.next_multiple_of(8);
    }
}

/// Writes `bytes` at `offset` of `image`.
fn patch(image: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
    file.write_all_at(bytes, offset).unwrap();
}

/// Patches the flags of the image's first bitmap (QEMU's directory entry, bytes 12..16).
fn set_first_flags(image: &Path, flags: u32) {
    use std::os::unix::fs::FileExt;
    let file = common::files::open_rw(image);
    let mut header = vec![0u8; 4096];
    file.read_exact_at(&mut header, 0).unwrap();
    let mut at = u32::from_be_bytes(header[100..104].try_into().unwrap()) as usize;
    let dir = loop {
        let kind = u32::from_be_bytes(header[at..at + 4].try_into().unwrap());
        let len = u32::from_be_bytes(header[at + 4..at + 8].try_into().unwrap()) as usize;
        assert_ne!(kind, 0, "no bitmaps extension");
        if kind == 0x2385_2875 {
            break u64::from_be_bytes(header[at + 24..at + 32].try_into().unwrap());
        }
        at += 8 + len.next_multiple_of(8);
    };
    file.write_all_at(&flags.to_be_bytes(), dir + 12).unwrap();
}

#[test]
fn a_bitmap_with_unknown_flags_refuses_tracking_and_a_bad_directory_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let image = create(dir.path());
    run("qemu-img", &["bitmap", "--add", s(&image), "x"]);
    set_first_flags(&image, 2 | 4);
    let err = refused_at_start(&["--disk", &spec(dir.path(), &image)]);
    assert!(
        err.contains("bitmap \"x\"") && err.contains("unknown bitmap flags"),
        "{err}"
    );
    // Read-only without tracking, it is served, and the image is left as it was.
    let before = std::fs::read(&image).unwrap();
    let daemon = Daemon::start(&[format!(
        "socket={},path={},readonly=on",
        dir.path().join("vm.sock").display(),
        image.display()
    )]);
    let client = Client::read_only(&dir.path().join("vm.sock"));
    drop(client);
    assert!(daemon.terminate().success());
    assert!(std::fs::read(&image).unwrap() == before);
    // Refused for tracking, the image's bitmaps stay as QEMU wrote them: QEMU reads them.
    set_first_flags(&image, 2);
    run("qemu-img", &["bitmap", "--add", s(&image), "y"]);
    assert_eq!(qemu_bitmaps(&image).len(), 2);
    // A directory past the end of the file, then unaligned, then a count of 0: said, and
    // the disk is refused, never served with a directory it cannot read.
    let ext = bitmaps_extension(&image);
    let good = std::fs::read(&image).unwrap()[ext as usize..ext as usize + 24].to_vec();
    for (at, bytes, why) in [
        (
            16,
            (1u64 << 40).to_be_bytes().to_vec(),
            "bitmap directory unaligned or past",
        ),
        (
            16,
            0x10200u64.to_be_bytes().to_vec(),
            "bitmap directory unaligned or past",
        ),
        (0, 0u32.to_be_bytes().to_vec(), "0 bitmaps"),
        (
            8,
            8u64.to_be_bytes().to_vec(),
            "directory size out of range",
        ),
    ] {
        patch(&image, ext, &good);
        patch(&image, ext + at, &bytes);
        let err = refused_at_start(&["--disk", &spec(dir.path(), &image)]);
        assert!(err.contains(why), "{why}: {err}");
    }
    patch(&image, ext, &good);
    // A bitmap table entry with reserved bits set: said when the bitmap is read.
    let table = {
        let dir_at = u64::from_be_bytes(good[16..24].try_into().unwrap());
        let raw = std::fs::read(&image).unwrap();
        u64::from_be_bytes(
            raw[dir_at as usize..dir_at as usize + 8]
                .try_into()
                .unwrap(),
        )
    };
    patch(&image, table, &(1u64 << 60).to_be_bytes());
    let err = refused_at_start(&["--disk", &spec(dir.path(), &image)]);
    assert!(err.contains("bad table entry"), "{err}");
}
