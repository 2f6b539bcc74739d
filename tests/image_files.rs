//! The image is opened once and locked: a path renamed or replaced after start reaches no VM,
//! and a second process cannot write the same image unless told to share it.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::ctl::ctl_json;
use common::{Client, Daemon, image, pattern, serve_with_control};

const SIZE: usize = 1 << 20;

/// `target` cannot write while `source` holds the image, and can once `source` is gone.
fn handed_over(source: Client, mut target: Client, byte: u8) {
    assert_ne!(
        target.write(0, 8192, &[byte; 4096]),
        0,
        "two writers at once"
    );
    drop(source);
    let deadline = Instant::now() + Duration::from_secs(10);
    while target.write(0, 8192, &[byte; 4096]) != 0 {
        assert!(Instant::now() < deadline, "the image was not handed over");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn socket_spec(dir: &std::path::Path, name: &str, path: &std::path::Path, extra: &str) -> String {
    format!(
        "socket={},path={}{extra}",
        dir.join(name).display(),
        path.display()
    )
}

/// Runs `vbmq serve` expecting it to refuse to start; returns its exit status (`None`: it was
/// still serving after 10 s, and was killed) and its stderr.
fn refused_start(disk: &str) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--disk", disk])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vbmq");
    let deadline = Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr);
    (code, stderr)
}

#[test]
fn a_renamed_and_replaced_image_reaches_no_new_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "vm.raw", SIZE, 1);
    let daemon = Daemon::start(&[socket_spec(dir.path(), "vm.sock", &path, "")]);
    let socket = dir.path().join("vm.sock");
    {
        let mut client = Client::connect(&socket, 1, false).unwrap();
        assert_eq!(client.write(0, 0, &[7u8; 4096]), 0);
    }
    // The operator (or an attacker with access to the directory) moves the image away and
    // puts another, larger file in its place.
    std::fs::rename(&path, dir.path().join("moved.raw")).unwrap();
    std::fs::write(&path, pattern(2, SIZE * 2)).unwrap();
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(
        client.capacity(),
        SIZE as u64,
        "the capacity of the image opened at start"
    );
    let (ret, data) = client.read(0, 0, 8192);
    assert_eq!(ret, 0);
    assert_eq!(data[..4096], [7u8; 4096], "what the first VM wrote");
    assert_eq!(data[4096..], pattern(1, SIZE)[4096..8192]);
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn a_second_process_cannot_take_a_writable_image_unless_lock_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "vm.raw", SIZE, 3);
    let first = Daemon::start(&[socket_spec(dir.path(), "a.sock", &path, "")]);
    for extra in ["", ",readonly=on"] {
        let (code, stderr) = refused_start(&socket_spec(dir.path(), "b.sock", &path, extra));
        assert_eq!(code, Some(2), "second vbmq{extra}: {stderr}");
        assert!(
            stderr.contains("vm.raw") && stderr.contains("in use by another process")
                || stderr.contains("written by another process"),
            "the error names the image and the lock: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
    // lock=off: the operator shares it knowingly.
    let second = Daemon::start(&[socket_spec(dir.path(), "c.sock", &path, ",lock=off")]);
    assert!(second.terminate().success());
    assert!(first.terminate().success());
}

#[test]
fn read_only_disks_share_an_image_across_processes_and_disks_of_one_process_share_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "base.raw", SIZE, 4);
    let ro = ",readonly=on";
    let first = Daemon::start(&[socket_spec(dir.path(), "a.sock", &path, ro)]);
    let second = Daemon::start(&[socket_spec(dir.path(), "b.sock", &path, ro)]);
    // A writable disk cannot join read-only disks of another process...
    let (code, stderr) = refused_start(&socket_spec(dir.path(), "c.sock", &path, ""));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(second.terminate().success());
    assert!(first.terminate().success());
    // ...but within one process a read-only and a writable disk on one image share its lock.
    let both = Daemon::start(&[
        socket_spec(dir.path(), "d.sock", &path, ro),
        socket_spec(dir.path(), "e.sock", &path, ""),
    ]);
    let mut writer = Client::connect(&dir.path().join("e.sock"), 1, false).unwrap();
    assert_eq!(writer.write(0, 0, &[9u8; 4096]), 0);
    assert_eq!(writer.flush(0), 0);
    drop(writer);
    // And the upgraded lock keeps other writers out.
    let (code, stderr) = refused_start(&socket_spec(dir.path(), "f.sock", &path, ""));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(both.terminate().success());
}

/// Whether another process could lock the whole image for writing now (as QEMU would).
fn lockable(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let file = common::files::open_rw(path);
    // SAFETY: an all-zero flock is valid; F_WRLCK over the whole file, on our own descriptor.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as i16;
    lock.l_whence = libc::SEEK_SET as i16;
    // SAFETY: F_OFD_SETLK reads the flock we pass.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) == 0 }
}

#[test]
fn the_image_is_free_the_moment_vbmq_has_exited() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "vm.raw", SIZE, 5);
    for round in 0..5 {
        let daemon = Daemon::start(&[socket_spec(dir.path(), "vm.sock", &path, ",queues=2")]);
        {
            let mut client = Client::connect(&dir.path().join("vm.sock"), 2, false).unwrap();
            assert_eq!(client.write(1, 4096, &[round as u8; 4096]), 0);
        }
        assert!(!lockable(&path), "round {round}: locked while served");
        assert!(daemon.terminate().success());
        // What a VMM started right after (qemu-storage-daemon, say) does first.
        assert!(
            lockable(&path),
            "round {round}: still locked after vbmq exited"
        );
    }
}

/// Two writable disks on one image: refused, unless both say `handover=on` (a migration);
/// then one writes at a time, in one process or two, the first to write until its frontend
/// stops (here: disconnects), and the other's writes fail meanwhile.
#[test]
fn two_writers_in_one_process_need_handover_and_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "base.raw", SIZE, 4);
    let mut both = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args([
            "serve",
            "--disk",
            &socket_spec(dir.path(), "a.sock", &path, ""),
        ])
        .args(["--disk", &socket_spec(dir.path(), "b.sock", &path, "")])
        .stderr(Stdio::piped())
        .output()
        .expect("run vbmq");
    assert_eq!(both.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&std::mem::take(&mut both.stderr)).to_string();
    assert!(stderr.contains("handover=on"), "{stderr}");

    let h = ",handover=on";
    let daemon = Daemon::start(&[
        socket_spec(dir.path(), "c.sock", &path, h),
        socket_spec(dir.path(), "d.sock", &path, h),
    ]);
    let mut source = Client::connect(&dir.path().join("c.sock"), 1, false).unwrap();
    let target = Client::connect(&dir.path().join("d.sock"), 1, false).unwrap();
    assert_eq!(source.write(0, 0, &[1u8; 4096]), 0);
    handed_over(source, target, 2);
    assert!(daemon.terminate().success());

    // The same between two processes (two hosts on shared storage, or an old and a new vbmq):
    // the lock is the image's, taken at the first write and given back with the frontend.
    let first = Daemon::start(&[socket_spec(dir.path(), "e.sock", &path, h)]);
    let second = Daemon::start(&[socket_spec(dir.path(), "f.sock", &path, h)]);
    // A process without handover=on cannot write while one of them does.
    let mut source = Client::connect(&dir.path().join("e.sock"), 1, false).unwrap();
    assert_eq!(source.write(0, 0, &[3u8; 4096]), 0);
    let (code, stderr) = refused_start(&socket_spec(dir.path(), "g.sock", &path, ""));
    assert_eq!(code, Some(2), "{stderr}");
    let target = Client::connect(&dir.path().join("f.sock"), 1, false).unwrap();
    handed_over(source, target, 4);
    assert!(second.terminate().success());
    assert!(first.terminate().success());
}

/// A resize through one `handover=on` disk reaches the other disks of the process on that image:
/// a live migration's destination, connecting afterwards, sees the size the guest has, and
/// `ctl list` the size the image has (the thrasher found it stale, seed 3114955243).
#[test]
fn a_resize_through_one_handover_disk_reaches_its_siblings_on_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "base.raw", SIZE, 6);
    let h = ",handover=on";
    let (daemon, control) = serve_with_control(
        dir.path(),
        &[
            socket_spec(dir.path(), "a.sock", &path, h),
            socket_spec(dir.path(), "b.sock", &path, h),
        ],
    );
    let a = dir.path().join("a.sock");
    let grown = (2 * SIZE).to_string();
    ctl_json(&control, &["resize", a.to_str().unwrap(), &grown]);
    let list = ctl_json(&control, &["list"]);
    let sizes: Vec<(String, u64)> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|d| (d["socket"].to_string(), d["size"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(sizes.len(), 2, "{list}");
    assert!(
        sizes.iter().all(|(_, size)| *size == 2 * SIZE as u64),
        "{sizes:?}"
    );
    let target = Client::connect(&dir.path().join("b.sock"), 1, false).unwrap();
    assert_eq!(target.capacity(), 2 * SIZE as u64);
    drop(target);
    assert!(daemon.terminate().success());
}
