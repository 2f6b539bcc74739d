//! Run-time `path=` disks on a confined vbmq (its defaults: Landlock and seccomp) are served
//! through io_uring, on spare rings made at start (`--run-time-rings`): one per queue, given
//! back when the disk is removed; with none left a queue falls back to positional I/O.

mod common;

use std::fs::File;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use blkio::{Completion, ReqFlags};
use common::ctl::ok;
use common::{Client, Daemon, ctl, image, pattern, wait_for};
use serde_json::Value;

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `vbmq serve --control DIR/run/ctl.sock --run-time-rings RINGS`, its log in DIR/log.
fn serve(dir: &Path, rings: usize) -> (Daemon, PathBuf) {
    let control = dir.join("run/ctl.sock");
    let log = File::create(dir.join("log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("serve")
        .arg("--control")
        .arg(&control)
        .arg("--run-time-rings")
        .arg(rings.to_string())
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn vbmq");
    let daemon = Daemon { child };
    wait_for(&control);
    (daemon, control)
}

fn add(control: &Path, socket: &Path, file: &Path, queues: usize) {
    let spec = format!("socket={},path={},queues={queues}", s(socket), s(file));
    let out = ctl(control, &["add-disk", &spec]);
    ok(&out);
}

/// The disk's engine counters (`vbmq ctl stats`): queues on a pooled ring, positional queues.
fn engine_queues(control: &Path, socket: &Path) -> (u64, u64) {
    let out = ctl(control, &["stats", s(socket)]);
    assert!(out.status.success(), "{out:?}");
    let stats: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let disk = if stats.is_array() {
        stats[0].clone()
    } else {
        stats
    };
    let engine = &disk["engine"];
    let count = |name: &str| engine[name].as_u64().unwrap_or_else(|| panic!("{disk}"));
    (count("pooled_ring_queues"), count("positional_queues"))
}

/// The completions posted on every io_uring of process `pid` (the CQ tails in fdinfo).
fn ring_completions(pid: u32) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let is_ring = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().contains("io_uring"));
        if !is_ring {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        let Ok(text) = std::fs::read_to_string(info) else {
            continue;
        };
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("CqTail:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("CqTail in an io_uring's fdinfo");
    }
    total
}

const DEPTH: usize = 32;
const BLOCK: usize = 4096;

/// Writes `DEPTH` blocks at once on queue `q` (all in flight together), then reads them back
/// the same way and checks them.
fn write_and_verify_at_depth(client: &mut Client, q: usize, seed: u64) {
    let buf = client.region.addr as *mut u8;
    let data: Vec<Vec<u8>> = (0..DEPTH)
        .map(|i| pattern(seed + i as u64, BLOCK))
        .collect();
    for (i, block) in data.iter().enumerate() {
        // SAFETY: the region holds BUF_LEN >= DEPTH * BLOCK bytes.
        let at = unsafe { buf.add(i * BLOCK) };
        // SAFETY: `at` has BLOCK bytes of the region left.
        unsafe { std::ptr::copy_nonoverlapping(block.as_ptr(), at, BLOCK) };
        let offset = (i * 2 * BLOCK) as u64;
        client.queues[q].write(offset, at, BLOCK, 0, ReqFlags::empty());
    }
    complete_all(client, q);
    // SAFETY: as above.
    unsafe { std::ptr::write_bytes(buf, 0, DEPTH * BLOCK) };
    for i in 0..DEPTH {
        // SAFETY: as above.
        let at = unsafe { buf.add(i * BLOCK) };
        let offset = (i * 2 * BLOCK) as u64;
        client.queues[q].read(offset, at, BLOCK, 0, ReqFlags::empty());
    }
    complete_all(client, q);
    for (i, block) in data.iter().enumerate() {
        // SAFETY: as above.
        let back = unsafe { std::slice::from_raw_parts(buf.add(i * BLOCK), BLOCK) };
        assert!(
            back == &block[..],
            "block {i} on queue {q}: other data read back"
        );
    }
}

fn complete_all(client: &mut Client, q: usize) {
    let mut done = [const { MaybeUninit::<Completion>::uninit() }; DEPTH];
    let mut timeout = Duration::from_secs(20);
    let n = client.queues[q]
        .do_io(&mut done, DEPTH, Some(&mut timeout), None)
        .expect("do_io");
    assert_eq!(n, DEPTH, "requests timed out");
    for c in &done[..n] {
        // SAFETY: do_io initialised `n` completions.
        assert_eq!(unsafe { c.assume_init_ref() }.ret, 0);
    }
}

#[test]
fn a_run_time_disk_is_served_on_pooled_rings_which_come_back_when_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    // Exactly the disk's queues.
    let (daemon, control) = serve(dir.path(), 2);
    let pid = daemon.child.id();
    let file = image(dir.path(), "vm.raw", 8 << 20, 3);
    let socket = dir.path().join("elsewhere/vm.sock");
    for round in 0..2u64 {
        add(&control, &socket, &file, 2);
        assert_eq!(engine_queues(&control, &socket), (2, 0), "round {round}");
        let mut client = Client::connect(&socket, 2, false).expect("connect");
        for q in 0..2 {
            let before = ring_completions(pid);
            write_and_verify_at_depth(&mut client, q, 10 * round + q as u64);
            let after = ring_completions(pid);
            // Every write and read went through a ring.
            assert!(
                after >= before + 2 * DEPTH as u64,
                "round {round}, queue {q}: {before} -> {after} completions on vbmq's rings"
            );
        }
        drop(client);
        let out = ctl(&control, &["remove-disk", s(&socket)]);
        assert!(out.status.success(), "{out:?}");
    }
    // What the rings wrote last (round 1, queue 1) is in the file.
    let on_disk = std::fs::read(&file).unwrap();
    assert!(on_disk[..BLOCK] == pattern(11, BLOCK)[..]);
    daemon.terminate_alive();
}

#[test]
fn with_the_pool_exhausted_a_queue_falls_back_and_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), 1);
    let file = image(dir.path(), "vm.raw", 8 << 20, 4);
    let socket = dir.path().join("elsewhere/vm.sock");
    add(&control, &socket, &file, 2);
    assert_eq!(engine_queues(&control, &socket), (1, 1));
    let mut client = Client::connect(&socket, 2, false).expect("connect");
    for q in 0..2 {
        write_and_verify_at_depth(&mut client, q, 20 + q as u64);
    }
    drop(client);
    let log = std::fs::read_to_string(dir.path().join("log")).unwrap();
    assert!(
        log.contains("--run-time-rings"),
        "no hint in the log:\n{log}"
    );

    let out = ctl(&control, &["remove-disk", s(&socket)]);
    assert!(out.status.success(), "{out:?}");
    daemon.terminate_alive();
}

#[test]
fn with_no_pool_a_run_time_disk_goes_without_io_uring() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), 0);
    let pid = daemon.child.id();
    let file = image(dir.path(), "vm.raw", 8 << 20, 5);
    let socket = dir.path().join("elsewhere/vm.sock");
    add(&control, &socket, &file, 1);
    assert_eq!(engine_queues(&control, &socket), (0, 1));
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    write_and_verify_at_depth(&mut client, 0, 30);
    assert_eq!(ring_completions(pid), 0, "a ring in a vbmq without a pool");
    drop(client);
    daemon.terminate_alive();
}

/// 4 KiB random reads at QD32 on one queue for `secs`: completions per second.
fn qd32_randread_iops(socket: &Path, capacity: u64, secs: f64) -> f64 {
    let mut client = Client::connect(socket, 1, false).expect("connect");
    let buf = client.region.addr as *mut u8;
    let blocks = capacity / BLOCK as u64;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % blocks) * BLOCK as u64
    };
    for slot in 0..DEPTH {
        // SAFETY: the region holds BUF_LEN >= DEPTH * BLOCK bytes.
        let at = unsafe { buf.add(slot * BLOCK) };
        client.queues[0].read(next(), at, BLOCK, slot, ReqFlags::empty());
    }
    let mut done = [const { MaybeUninit::<Completion>::uninit() }; DEPTH];
    let start = std::time::Instant::now();
    let mut ios = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let mut timeout = Duration::from_secs(20);
        let n = client.queues[0]
            .do_io(&mut done, 1, Some(&mut timeout), None)
            .expect("do_io");
        for c in &done[..n] {
            // SAFETY: do_io initialised `n` completions.
            let c = unsafe { c.assume_init_ref() };
            assert_eq!(c.ret, 0);
            ios += 1;
            // SAFETY: as above.
            let at = unsafe { buf.add(c.user_data * BLOCK) };
            client.queues[0].read(next(), at, BLOCK, c.user_data, ReqFlags::empty());
        }
    }
    let rate = ios as f64 / start.elapsed().as_secs_f64();
    let mut timeout = Duration::from_secs(20);
    let _ = client.queues[0].do_io(&mut done, DEPTH, Some(&mut timeout), None);
    rate
}

/// A coarse comparison, not a test: `VBMQ_BENCH_DIR=/some/ext4/dir cargo test --release --test
/// run_time_rings -- --ignored --nocapture` (a 256 MiB image there, read `O_DIRECT`).
#[test]
#[ignore]
fn qd32_randread_pooled_ring_against_positional() {
    let base = std::env::var_os("VBMQ_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = tempfile::tempdir_in(base).unwrap();
    let size = 256usize << 20;
    let file = image(dir.path(), "bench.raw", size, 9);
    File::open(&file).unwrap().sync_all().unwrap();
    let mut results: Vec<(usize, Vec<f64>)> = vec![(1, Vec::new()), (0, Vec::new())];
    for round in 0..3 {
        for (rings, rates) in &mut results {
            // A fresh directory: a killed daemon's control socket file would be waited for.
            let run = dir.path().join(format!("d{rings}-{round}"));
            std::fs::create_dir_all(&run).unwrap();
            let (daemon, control) = serve(&run, *rings);
            let socket = run.join("b.sock");
            add(&control, &socket, &file, 1);
            assert_eq!(engine_queues(&control, &socket).0, *rings as u64);
            qd32_randread_iops(&socket, size as u64, 1.0); // warm-up
            rates.push(qd32_randread_iops(&socket, size as u64, 4.0));
            drop(daemon);
        }
    }
    for (rings, rates) in &mut results {
        rates.sort_by(f64::total_cmp);
        let name = if *rings == 1 {
            "pooled ring"
        } else {
            "positional"
        };
        println!(
            "{name}: median {:.0} IOPS (min {:.0}, max {:.0})",
            rates[1], rates[0], rates[2]
        );
    }
}
