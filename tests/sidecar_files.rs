//! The files vbmq makes or opens beside an image, against the real `vbmq serve` and `vbmq ctl`
//! (SECURITY.md, "Files beside an image"): a symbolic link planted at `DISK.map.new`,
//! `DISK.map` or a `base=` disk's `DISK` changes no file it leads to, at start and in `ctl
//! add-disk`; a snapshot into a file the daemon uses (a map, an image, a key file) is refused
//! and the file is unchanged.

mod common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{ctl, image, serve_with_control as serve};

const SIZE: usize = 1 << 20;

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `PATH` + `suffix`.
fn beside(path: &Path, suffix: &str) -> PathBuf {
    PathBuf::from(format!("{}{suffix}", s(path)))
}

/// Runs `vbmq serve --disk SPEC` until it exits (refused: its status and log) or its socket
/// appears (served: it is stopped then, and `None` returned).
fn serve_once(spec: &str, socket: &Path) -> Option<(i32, String)> {
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--disk", spec])
        .stdin(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .expect("spawn vbmq");
    // Against a hang only: each start ends one way or the other long before.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            return Some((status.code().unwrap_or(-1), text));
        }
        if socket.exists() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(socket);
            return None;
        }
        assert!(Instant::now() < deadline, "vbmq neither served nor exited");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn refused(out: &Output, reason: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted; wanted refused: {reason}");
    assert!(err.contains(reason), "{err:?} lacks {reason:?}");
}

/// A file a link will lead to, and what it holds.
fn victim(dir: &Path, name: &str, contents: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// A `base=` disk whose DISK is a link to an empty file: its socket, DISK, spec and the empty
/// file.
fn plant_link_at_disk(dir: &Path) -> (PathBuf, PathBuf, String, PathBuf) {
    let base = image(dir, "base.raw", SIZE, 1);
    let socket = dir.join("d.sock");
    let disk = dir.join("d.raw");
    let spec = format!("socket={},path={},base={}", s(&socket), s(&disk), s(&base));
    let empty = victim(dir, "empty.raw", b"");
    std::os::unix::fs::symlink(&empty, &disk).unwrap();
    (socket, disk, spec, empty)
}

#[test]
fn links_planted_beside_a_base_disk_at_start_change_nothing_they_lead_to() {
    let dir = tempfile::tempdir().unwrap();
    let (socket, disk, spec, empty) = plant_link_at_disk(dir.path());
    let precious = b"another tenant's file".to_vec();

    // At DISK: refused; the empty file it leads to is neither grown nor given a map.
    let (code, log) = serve_once(&spec, &socket).expect("served through a link at DISK");
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("symbolic link"), "{log}");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert!(!beside(&empty, ".map").exists() && !beside(&disk, ".map").exists());
    std::fs::remove_file(&disk).unwrap();

    // At DISK.map.new: the stale link is removed, not followed; the disk is served.
    let target = victim(dir.path(), "new-victim", &precious);
    std::os::unix::fs::symlink(&target, beside(&disk, ".map.new")).unwrap();
    assert!(serve_once(&spec, &socket).is_none(), "refused");
    assert_eq!(std::fs::read(&target).unwrap(), precious);
    assert!(std::fs::symlink_metadata(beside(&disk, ".map.new")).is_err());
    assert!(
        std::fs::symlink_metadata(beside(&disk, ".map"))
            .unwrap()
            .is_file()
    );

    // At DISK.map: refused, the file it leads to unchanged.
    let target = victim(dir.path(), "map-victim", &precious);
    std::fs::remove_file(beside(&disk, ".map")).unwrap();
    std::os::unix::fs::symlink(&target, beside(&disk, ".map")).unwrap();
    std::fs::write(&disk, b"").unwrap();
    let (code, log) = serve_once(&spec, &socket).expect("served through a link at DISK.map");
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("symbolic link"), "{log}");
    assert_eq!(std::fs::read(&target).unwrap(), precious);
}

#[test]
fn links_planted_beside_a_base_disk_added_at_run_time_change_nothing_they_lead_to() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path(), &[]);
    let (socket, disk, spec, empty) = plant_link_at_disk(dir.path());
    let precious = b"another tenant's file".to_vec();

    // At DISK: refused; the empty file it leads to is neither grown nor given a map.
    refused(&ctl(&control, &["add-disk", &spec]), "symbolic link");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert!(
        std::fs::symlink_metadata(&disk).unwrap().is_symlink(),
        "left as it was"
    );
    assert!(!beside(&disk, ".map").exists());
    std::fs::remove_file(&disk).unwrap();

    // At DISK.map (a short file, which a blank map would be written over): refused.
    let target = victim(dir.path(), "map-victim", &precious);
    std::os::unix::fs::symlink(&target, beside(&disk, ".map")).unwrap();
    refused(&ctl(&control, &["add-disk", &spec]), "symbolic link");
    assert_eq!(std::fs::read(&target).unwrap(), precious);
    assert!(
        !disk.exists(),
        "the DISK made for the refused disk is removed"
    );
    assert!(!socket.exists());
    assert!(daemon.alive());
}

#[test]
fn a_snapshot_into_a_file_vbmq_uses_is_refused_and_the_file_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let base = image(dir.path(), "base.raw", SIZE, 1);
    let thin = dir.path().join("thin.raw");
    let thin_socket = dir.path().join("thin.sock");
    let plain = image(dir.path(), "plain.raw", SIZE, 2);
    let plain_socket = dir.path().join("plain.sock");
    let key = dir.path().join("key");
    std::fs::write(&key, common::pattern(77, 64)).unwrap();
    let disks = [
        format!(
            "socket={},path={},base={},track-changes=on",
            s(&thin_socket),
            s(&thin),
            s(&base)
        ),
        format!(
            "socket={},path={},encrypt=aes-xts,key-file={}",
            s(&plain_socket),
            s(&plain),
            s(&key)
        ),
    ];
    let (mut daemon, control) = serve(dir.path(), &disks);
    let targets = [
        beside(&thin, ".map"),
        beside(&thin, ".changes"),
        plain.clone(),
        base.clone(),
        key.clone(),
    ];
    for target in &targets {
        let before = std::fs::read(target).unwrap();
        let out = ctl(
            &control,
            &["snapshot", s(&thin_socket), s(target), "--force"],
        );
        refused(&out, "a file vbmq uses");
        assert!(
            std::fs::read(target).unwrap() == before,
            "{target:?} changed"
        );
    }
    // Under another name (a hard link, which `vbmq ctl` refuses itself), by a raw request.
    let other_name = dir.path().join("other-name");
    std::fs::hard_link(beside(&thin, ".map"), &other_name).unwrap();
    let before = std::fs::read(&other_name).unwrap();
    let file = std::fs::File::options()
        .write(true)
        .open(&other_name)
        .unwrap();
    let body = serde_json::json!({"version": 1, "command": "snapshot", "socket": s(&plain_socket)});
    let reply = common::control_request(&control, &body, &[file.as_raw_fd()]);
    assert_eq!(reply["ok"], false, "{reply}");
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(error.contains("a file vbmq uses"), "{error}");
    assert!(std::fs::read(&other_name).unwrap() == before);
    refused(
        &ctl(
            &control,
            &["snapshot", s(&thin_socket), s(&other_name), "--force"],
        ),
        "more than one link",
    );
    // A file of its own is a snapshot as before.
    let own = dir.path().join("snap.raw");
    let out = ctl(&control, &["snapshot", s(&thin_socket), s(&own)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::metadata(&own).unwrap().len(), SIZE as u64);
    assert!(daemon.alive());
}
