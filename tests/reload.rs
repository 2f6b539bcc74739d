//! A reload that cannot hurt a running VM (`vbmq serve --config`, confined as by default): a
//! limit-only change applies in place to a disk under I/O, which stays connected with no error
//! and takes the new limit; a file with one bad line, a change that cannot be made in place or
//! a disk the confined process cannot open is refused whole, exit 2, and changes nothing;
//! `--replace` removes and adds a changed disk.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::ctl::{list, ok, write_config};
use common::{Client, Serve, ctl, image, pattern, s};
use serde_json::Value;

fn entry(control: &Path, socket: &Path) -> Value {
    list(control)
        .into_iter()
        .find(|d| d["socket"] == s(socket))
        .expect("the disk is listed")
}

/// Refused: exit 2, one line saying `why`.
fn refused(control: &Path, args: &[&str], why: &str) {
    let out = ctl(control, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(why), "{stderr:?} lacks {why:?}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn a_limit_change_applies_in_place_under_io_and_a_bad_reload_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let control = run.join("ctl.sock");
    let file = image(dir.path(), "a.raw", 8 << 20, 5);
    let (a, b) = (run.join("a.sock"), run.join("b.sock"));
    let disk_a = |extra: &str| format!("socket={},path={}{extra}", s(&a), s(&file));
    let disk_b = |size: &str| format!("socket={},null={size}", s(&b));
    let conf = dir.path().join("etc/vbmq.toml");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    write_config(&conf, &control, &[disk_a(""), disk_b("1G")]);
    let mut daemon = Serve::config(&conf, &[&control, &a, &b])
        .piped_stderr()
        .start();
    // The log, line by line, to wait for what SIGHUP says.
    let (log_tx, log) = std::sync::mpsc::channel::<String>();
    let stderr = daemon.child.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            eprintln!("{line}");
            let _ = log_tx.send(line);
        }
    });

    // A client writes and reads back on A throughout.
    let (requests, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (a, requests, errors, stop) =
            (a.clone(), requests.clone(), errors.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut client = Client::connect(&a, 1, false).expect("connect to A");
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (offset, data) = ((round % 64) * 4096, pattern(round, 4096));
                if client.write(0, offset, &data) != 0 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                requests.fetch_add(1, Ordering::Relaxed);
                let (ret, back) = client.read(0, offset, 4096);
                if ret != 0 || back != data {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                requests.fetch_add(1, Ordering::Relaxed);
                round += 1;
            }
        })
    };
    let wait_requests = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while requests.load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "the client stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_requests(100);

    // Limits only: in place.
    write_config(&conf, &control, &[disk_a(",iops=50"), disk_b("1G")]);
    let out = ctl(&control, &["reload"]);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("changed in place"),
        "{out:?}"
    );
    // 100 requests at 50 a second (a burst of 5 at most): about 2 s, at least 1.
    let (start, from) = (Instant::now(), requests.load(Ordering::Relaxed));
    wait_requests(from + 100);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "100 requests in {took:?} at iops=50"
    );
    let listed = entry(&control, &a);
    assert_eq!(listed["connected"], true, "{listed}");
    assert_eq!(listed["limits"]["iops"], 50, "{listed}");
    assert_eq!(listed["spec"], disk_a(",iops=50"));

    // One bad line: nothing changes, not even the good lines.
    let bad = format!("socket={},null=1G,queues=0", s(&run.join("x.sock")));
    write_config(&conf, &control, &[disk_a(",iops=1000"), disk_b("1G"), bad]);
    refused(&control, &["reload"], "queues");
    // SIGHUP: the same refusal, logged.
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(daemon.child.id().cast_signed(), libc::SIGHUP) };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = log.recv_timeout(left).expect("SIGHUP's refusal in the log");
        if line.contains("configuration not reloaded") {
            assert!(line.contains("queues"), "{line}");
            break;
        }
    }
    // A change that cannot be made in place, without --replace.
    write_config(
        &conf,
        &control,
        &[disk_a(",iops=1000,queues=2"), disk_b("1G")],
    );
    refused(&control, &["reload"], "cannot change in place");
    // A new file disk: the confined process cannot open it.
    let c = format!("socket={},path={}", s(&run.join("c.sock")), s(&file));
    write_config(&conf, &control, &[disk_a(",iops=1000"), disk_b("1G"), c]);
    refused(&control, &["reload"], "vbmq ctl add-disk");
    // Another image for A, even with --replace: the confined process cannot open it.
    let other = image(dir.path(), "other.raw", 1 << 20, 6);
    let a_other = format!("socket={},path={},queues=2", s(&a), s(&other));
    write_config(&conf, &control, &[a_other, disk_b("1G")]);
    refused(&control, &["reload", "--replace"], "cannot be added again");
    let listed = entry(&control, &a);
    assert_eq!(listed["limits"]["iops"], 50, "{listed}");
    assert_eq!(listed["connected"], true, "{listed}");
    assert_eq!(list(&control).len(), 2);
    assert!(!run.join("x.sock").exists() && !run.join("c.sock").exists());

    // --replace: a disk that can be added again is removed and added.
    write_config(&conf, &control, &[disk_a(",iops=50"), disk_b("2G")]);
    refused(&control, &["reload"], "cannot change in place");
    let out = ctl(&control, &["reload", "--replace"]);
    ok(&out);
    assert_eq!(entry(&control, &b)["size"], 2u64 << 30);

    stop.store(true, Ordering::Relaxed);
    load.join().expect("the client");
    assert_eq!(errors.load(Ordering::Relaxed), 0, "I/O errors on A");

    // --replace on a file disk: served again from the image it holds, with the new line.
    let data = pattern(99, 8192);
    let mut client = Client::connect(&a, 1, false).expect("connect to A");
    assert_eq!(client.write(0, 1 << 20, &data), 0);
    drop(client);
    write_config(&conf, &control, &[disk_a(",queues=2"), disk_b("2G")]);
    let out = ctl(&control, &["reload", "--replace"]);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("replaced"),
        "{out:?}"
    );
    assert_eq!(entry(&control, &a)["queues"], 2);
    let mut client = Client::connect(&a, 2, false).expect("connect to A again");
    assert!(client.read(1, 1 << 20, data.len()).1 == data);
    drop(client);
    daemon.terminate_alive();
}
