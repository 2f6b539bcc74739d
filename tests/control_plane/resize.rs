//! `vbmq ctl resize`: a file disk grows (its file with it) under a connected frontend, and a
//! frontend connecting afterwards reads and writes the new tail; shrinking needs `--force`;
//! disks that cannot change size say so and keep theirs.

use std::path::Path;

use crate::common::{Client, ctl, ctl_json, image, pattern, s, serve_with_control as serve};

fn refused(control: &Path, args: &[&str], why: &str) {
    let out = ctl(control, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(why), "{args:?}: {stderr}");
}

#[test]
fn a_file_disk_grows_and_shrinks_only_when_forced() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "d.raw", 8 << 20, 5);
    let socket = dir.path().join("d.sock");
    let (daemon, control) = serve(
        dir.path(),
        &[format!("socket={},path={},queues=2", s(&socket), s(&file))],
    );
    let mut before = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(before.capacity(), 8 << 20);
    // Past the end: refused.
    assert_ne!(before.write(0, 12 << 20, &pattern(1, 4096)), 0);

    let info = ctl_json(&control, &["resize", s(&socket), "16M"]);
    assert_eq!(info["size"], 16 << 20);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 16 << 20);
    // The connection that was there goes on serving.
    assert!(before.read(1, 0, 4096).1 == pattern(5, 8 << 20)[..4096]);
    drop(before);
    // A frontend connecting now sees the new capacity and uses the tail.
    let mut after = Client::connect(&socket, 2, false).unwrap();
    after.uses_the_tail(16 << 20, 2, 1);
    drop(after);

    refused(
        &control,
        &["resize", s(&socket), "4M"],
        "shrinking loses data",
    );
    refused(&control, &["resize", s(&socket), "1000"], "multiple of 512");
    refused(
        &control,
        &["resize", s(&dir.path().join("no.sock")), "1G"],
        "no disk",
    );
    let info = ctl_json(&control, &["resize", s(&socket), "4M", "--force"]);
    assert_eq!(info["size"], 4 << 20);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 4 << 20);
    let mut small = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(small.capacity(), 4 << 20);
    assert_ne!(small.read(0, 6 << 20, 4096).0, 0, "a read past the new end");
    drop(small);
    assert!(daemon.terminate().success());
}

#[test]
fn disks_that_cannot_change_size_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "ro.raw", 4 << 20, 6);
    let ro = dir.path().join("ro.sock");
    let mem = dir.path().join("mem.sock");
    let null = dir.path().join("null.sock");
    let (daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={},readonly=on", s(&ro), s(&file)),
            format!("socket={},mem=4M", s(&mem)),
            format!("socket={},null=4M", s(&null)),
        ],
    );
    refused(&control, &["resize", s(&ro), "8M"], "readonly");
    refused(&control, &["resize", s(&mem), "8M"], "cannot be resized");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 4 << 20);
    let info = ctl_json(&control, &["resize", s(&null), "1G"]);
    assert_eq!(info["size"], 1 << 30);
    let list = ctl_json(&control, &["list"]);
    let sizes: Vec<u64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["size"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![4 << 20, 4 << 20, 1 << 30]);
    assert!(daemon.terminate().success());
}
