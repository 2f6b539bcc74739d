//! The real `vbmq serve` process driven through its vhost-user socket by libblkio.

mod common;

use common::{Client, Daemon, image, pattern};

fn disk(dir: &std::path::Path, name: &str, extra: &str) -> (String, std::path::PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    (format!("socket={},{extra}", socket.display()), socket)
}

#[test]
fn every_queue_reads_what_every_other_queue_wrote() {
    for mode in ["event", "poll", "adaptive"] {
        let dir = tempfile::tempdir().unwrap();
        let file = image(dir.path(), "disk.raw", 8 << 20, 1);
        let (spec, socket) = disk(
            dir.path(),
            "d",
            &format!("path={},queues=2,mode={mode},cpus=0-1", file.display()),
        );
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 2, mode == "poll").unwrap();
        assert_eq!(client.capacity(), 8 << 20);
        for q in 0..2 {
            let data = pattern(10 + q as u64, 64 << 10);
            let offset = (q as u64 + 1) * (1 << 20);
            assert_eq!(
                client.write(q, offset, &data),
                0,
                "{mode}: write on queue {q}"
            );
            let (ret, back) = client.read(1 - q, offset, data.len());
            assert_eq!(ret, 0, "{mode}: read on queue {}", 1 - q);
            assert!(back == data, "{mode}: queue {} read other data", 1 - q);
        }
        // Untouched data reads as the image was written.
        let (ret, back) = client.read(0, 4 << 20, 4096);
        assert_eq!(ret, 0);
        assert_eq!(back, pattern(1, 8 << 20)[4 << 20..(4 << 20) + 4096]);
        assert_eq!(client.flush(0), 0);
        drop(client);
        assert!(daemon.terminate().success(), "{mode}: exit status");
        // Writes reached the file.
        let contents = std::fs::read(&file).unwrap();
        assert_eq!(
            contents[1 << 20..(1 << 20) + (64 << 10)],
            pattern(10, 64 << 10)[..]
        );
    }
}

#[test]
fn discard_and_write_zeroes_read_back_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "disk.raw", 4 << 20, 2);
    let (spec, socket) = disk(dir.path(), "d", &format!("path={}", file.display()));
    let daemon = Daemon::start(&[spec]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.discard(0, 1 << 20, 64 << 10), 0);
    assert_eq!(client.write_zeroes(0, 2 << 20, 8192, false), 0);
    assert_eq!(client.write_zeroes(0, 3 << 20, 4096, true), 0);
    for (offset, len) in [(1 << 20, 64 << 10), (2 << 20, 8192), (3 << 20, 4096)] {
        let (ret, back) = client.read(0, offset, len);
        assert_eq!(ret, 0);
        assert!(
            back.iter().all(|b| *b == 0),
            "range at {offset} is not zero"
        );
    }
    // The bytes around each range are untouched.
    let (_, before) = client.read(0, (1 << 20) - 512, 512);
    assert_eq!(before, pattern(2, 4 << 20)[(1 << 20) - 512..1 << 20]);
    let (_, after) = client.read(0, (2 << 20) + 8192, 512);
    assert_eq!(
        after,
        pattern(2, 4 << 20)[(2 << 20) + 8192..(2 << 20) + 8704]
    );
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn readonly_disk_refuses_writes_and_keeps_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "disk.raw", 1 << 20, 3);
    let (spec, socket) = disk(
        dir.path(),
        "d",
        &format!("path={},readonly=on", file.display()),
    );
    let daemon = Daemon::start(&[spec]);
    // Offered read-only; a write refused and a flush served. (vbmq's own refusal of a write
    // that reaches it is tested by the request parser's unit tests and the hostile-frontend
    // battery, which can send what libblkio will not.) Reads are served.
    let mut client = Client::read_only(&socket);
    let (ret, back) = client.read(0, 0, 4096);
    assert_eq!(ret, 0);
    assert_eq!(back, pattern(3, 4096));
    drop(client);
    assert!(daemon.terminate().success());
    assert_eq!(std::fs::read(&file).unwrap(), pattern(3, 1 << 20));
}

#[test]
fn request_past_capacity_fails_and_the_disk_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "disk.raw", 1 << 20, 4);
    let (spec, socket) = disk(dir.path(), "d", &format!("path={}", file.display()));
    let daemon = Daemon::start(&[spec]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_ne!(client.read(0, 1 << 20, 4096).0, 0, "read at capacity");
    assert_ne!(
        client.read(0, (1 << 20) - 512, 1024).0,
        0,
        "read across capacity"
    );
    assert_ne!(client.write(0, 1 << 20, &[1; 512]), 0, "write at capacity");
    let (ret, back) = client.read(0, (1 << 20) - 4096, 4096);
    assert_eq!(ret, 0);
    assert_eq!(back, pattern(4, 1 << 20)[(1 << 20) - 4096..]);
    drop(client);
    assert!(daemon.terminate().success());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);
}

#[test]
fn one_process_serves_two_disks_and_a_second_client() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "a.raw", 2 << 20, 5);
    let (spec_a, socket_a) = disk(
        dir.path(),
        "a",
        &format!("path={},queues=2", file.display()),
    );
    let (spec_b, socket_b) = disk(dir.path(), "b", "null=1G,mode=event");
    let daemon = Daemon::start(&[spec_a, spec_b]);
    let mut a = Client::connect(&socket_a, 2, false).unwrap();
    let mut b = Client::connect(&socket_b, 1, false).unwrap();
    assert_eq!(b.capacity(), 1 << 30);
    let data = pattern(50, 8192);
    assert_eq!(a.write(1, 4096, &data), 0);
    assert_eq!(b.write(0, 1 << 29, &data), 0);
    let (ret, zeros) = b.read(0, 1 << 29, 8192);
    assert_eq!(ret, 0);
    assert!(zeros.iter().all(|x| *x == 0), "the null disk stored data");
    drop(a);
    // The next frontend on the same socket sees what the first one wrote.
    let mut again = Client::connect(&socket_a, 2, false).unwrap();
    assert_eq!(again.read(0, 4096, 8192), (0, data));
    drop(again);
    drop(b);
    assert!(daemon.terminate().success());
}

#[test]
fn get_id_returns_the_serial() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, socket) = disk(dir.path(), "d", "null=64M,serial=vbmq-test-serial");
    let daemon = Daemon::start(&[spec]);
    let client = Client::connect(&socket, 1, false).unwrap();
    // libblkio does not issue GET_ID; the config space it read must match the disk.
    assert_eq!(client.capacity(), 64 << 20);
    assert_eq!(client.blkio.get_i32("max-queues").unwrap(), 1);
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn sigusr1_prints_each_queues_counters() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, socket) = disk(dir.path(), "d", "null=64M,queues=2");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"));
    let child = cmd
        .args(["serve", "--disk", &spec])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for(&socket);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(client.write(1, 0, &[7; 8192]), 0);
    assert_eq!(client.read(1, 0, 4096).0, 0);
    assert_ne!(client.read(1, 64 << 20, 4096).0, 0);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id().cast_signed(), libc::SIGUSR1) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(client);
    // SAFETY: as above.
    unsafe { libc::kill(child.id().cast_signed(), libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[queue 1: requests=3 errors=1 read_bytes=4096 write_bytes=8192]"),
        "{stderr}"
    );
}

#[test]
fn reconnecting_frontends_leak_no_descriptors_or_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, socket) = disk(dir.path(), "d", "null=64M,queues=2");
    let daemon = Daemon::start(&[spec]);
    let pid = daemon.child.id();
    let count = |what: &str| {
        std::fs::read_dir(format!("/proc/{pid}/{what}"))
            .unwrap()
            .count()
    };
    let cycle = || {
        let mut client = Client::connect(&socket, 2, false).unwrap();
        assert_eq!(client.read(1, 0, 4096).0, 0);
    };
    cycle();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (fds, threads) = (count("fd"), count("task"));
    for _ in 0..10 {
        cycle();
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(count("fd"), fds, "descriptors leaked across 10 connections");
    assert_eq!(
        count("task"),
        threads,
        "threads leaked across 10 connections"
    );
    daemon.terminate_alive();
}

#[test]
fn tmpfs_file_read_inline_and_through_the_ring() {
    // /dev/shm is tmpfs: by default reads and writes are done on the queue's thread;
    // io=ring sends them through io_uring like any other file.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let file = image(dir.path(), "disk.raw", 2 << 20, 8);
    for io in ["auto", "ring"] {
        let (spec, socket) = disk(dir.path(), io, &format!("path={},io={io}", file.display()));
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let data = pattern(80, 12288);
        assert_eq!(client.write(0, 8192, &data), 0, "io={io}");
        assert_eq!(
            client.read(0, 8192, data.len()),
            (0, data.clone()),
            "io={io}"
        );
        let (ret, back) = client.read(0, 1 << 20, 4096);
        assert_eq!(ret, 0);
        assert_eq!(
            back,
            pattern(8, 2 << 20)[1 << 20..(1 << 20) + 4096],
            "io={io}"
        );
        drop(client);
        assert!(daemon.terminate().success());
    }
}

/// The kernel's count of pages pinned for the process (`VmPin`, kB): io_uring's registered
/// buffers.
fn pinned_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmPin:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn fixed_buffers_pin_guest_memory_while_a_guest_is_connected() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "disk.raw", 4 << 20, 9);
    let (spec, socket) = disk(
        dir.path(),
        "fixed",
        &format!("path={},io=ring,fixed-buffers=on,queues=2", file.display()),
    );
    let daemon = Daemon::start(&[spec]);
    let pid = daemon.child.id();
    assert_eq!(pinned_kb(pid), 0, "nothing pinned before a guest connects");
    let mut client = Client::connect(&socket, 2, false).unwrap();
    for q in 0..2 {
        let data = pattern(90 + q as u64, 64 << 10);
        let offset = (q as u64 + 1) << 20;
        assert_eq!(client.write(q, offset, &data), 0, "write on queue {q}");
        assert_eq!(client.read(1 - q, offset, data.len()), (0, data));
    }
    // Each queue's ring holds the guest's memory, registered once the first request came.
    assert!(pinned_kb(pid) > 0, "no guest memory registered");
    drop(client);
    // Let go when the guest leaves.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pinned_kb(pid) > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(pinned_kb(pid), 0, "guest memory still pinned after it left");
    assert!(daemon.terminate().success());
}
