//! `vbmq serve --control` driven through `vbmq ctl` and raw control-socket clients: disks
//! added and removed while another disk serves a verify workload, refused specs, hostile
//! control clients, and the JSON that `list` and `stats` return.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::common::disk_spec;
use crate::common::{Client, ctl, ctl_json, image, pattern, s, serve_with_control as serve};
use serde_json::Value;

#[test]
fn disks_come_and_go_while_another_disk_reads_back_what_it_wrote() {
    disks_come_and_go("");
}

/// The same with every queue polled on one CPU: the disks come and go from the thread that
/// serves the other disk's queues.
#[test]
fn disks_come_and_go_on_the_cpu_thread_of_another_disk() {
    disks_come_and_go(",mode=poll,cpus=1,1");
}

fn disks_come_and_go(placement: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "a.raw", 8 << 20, 3);
    let a = dir.path().join("a.sock");
    let (mut daemon, control) = serve(
        dir.path(),
        &[disk_spec::with(&a, &file, &format!(",queues=2{placement}"))],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (a, stop) = (a.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut client = Client::connect(&a, 2, false).expect("connect to disk A");
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds == 0 {
                let q = (rounds % 2) as usize;
                let offset = (rounds % 64) * (128 << 10);
                let data = pattern(100 + rounds, 128 << 10);
                assert_eq!(client.write(q, offset, &data), 0, "write {rounds}");
                let (ret, back) = client.read(1 - q, offset, data.len());
                assert_eq!(ret, 0, "read {rounds}");
                assert!(back == data, "round {rounds}: disk A read back other data");
                rounds += 1;
            }
            rounds
        })
    };
    let b = dir.path().join("run/b.sock");
    let spec_b = format!("socket={},mem=16M,queues=2{placement}", s(&b));
    for round in 0..8 {
        let added = ctl_json(&control, &["add-disk", &spec_b]);
        assert_eq!(added["socket"], s(&b));
        assert_eq!(added["size"], 16 << 20);
        assert_eq!(added["queues"], 2);
        if round % 2 == 0 {
            // Removed with a frontend attached and I/O done: drained and disconnected.
            let mut client = Client::connect(&b, 2, false).expect("connect to disk B");
            let data = pattern(round, 64 << 10);
            assert_eq!(client.write(0, 0, &data), 0);
            assert!(client.read(1, 0, data.len()).1 == data);
            let listed = ctl_json(&control, &["list"]);
            let b_entry = listed
                .as_array()
                .and_then(|d| d.iter().find(|d| d["socket"] == s(&b)))
                .expect("B listed");
            assert_eq!(b_entry["connected"], true);
            let out = ctl(&control, &["remove-disk", s(&b)]);
            assert!(out.status.success(), "{out:?}");
            drop(client);
        } else {
            let out = ctl(&control, &["remove-disk", s(&b)]);
            assert!(out.status.success(), "{out:?}");
        }
        assert!(!b.exists(), "round {round}: socket left behind");
        assert!(
            !dir.path().join("run/b.sock.lock").exists(),
            "round {round}: lock file left behind"
        );
        let listed = ctl_json(&control, &["list"]);
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = load.join().expect("disk A's workload saw an error");
    assert!(rounds > 0);
    assert!(daemon.alive());
    let stats = ctl_json(&control, &["stats", s(&a)]);
    let requests: u64 = stats[0]["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["requests"].as_u64().expect("requests"))
        .sum();
    assert!(requests >= 2 * rounds, "{stats}");
    assert!(daemon.terminate().success());
    assert!(!control.exists(), "control socket left behind at exit");
}

/// A disk given the control socket's path or a share's, or two shares given one socket: the
/// second bind would take the path from the first. Refused at start, one line, exit 2.
#[test]
fn a_socket_path_given_twice_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let control = run.join("ctl.sock");
    let share_socket = run.join("fs.sock");
    let disk = |socket: &Path| format!("socket={},null=1G", s(socket));
    let share = |tag: &str| format!("socket={},dir={},tag={tag}", s(&share_socket), s(&shared));
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--control".into(),
                s(&control).into(),
                "--disk".into(),
                disk(&control),
            ],
            "is given to a disk and to the control socket (--control)",
        ),
        (
            vec![
                "--disk".into(),
                disk(&share_socket),
                "--fs".into(),
                share("a"),
            ],
            "is given to a disk and to a share",
        ),
        (
            vec!["--fs".into(), share("a"), "--fs".into(), share("b")],
            "is given to two shares (--fs socket)",
        ),
        (
            vec![
                "--control".into(),
                s(&share_socket).into(),
                "--fs".into(),
                share("a"),
            ],
            "is given to a share and to the control socket (--control)",
        ),
    ];
    for (args, expected) in &cases {
        let stderr = crate::common::serve::exits_2_at_start(args);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(!control.exists(), "{args:?}: a socket was bound");
        assert!(!share_socket.exists(), "{args:?}: a socket was bound");
    }
}

#[test]
fn a_refused_spec_is_one_line_and_exit_2_and_the_daemon_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path(), &[]);
    let run = dir.path().join("run");
    let img = image(dir.path(), "x.raw", 1 << 20, 1);
    let cases = [
        (
            format!("socket={},null=1G,queues=999", s(&run.join("x.sock"))),
            "vbmq: --disk queues: must be 1..=64",
        ),
        // `vbmq ctl` opens the image and binds the socket itself (tests/run_time_disks/passed_disks.rs).
        (
            format!(
                "socket={},path={}",
                s(&run.join("x.sock")),
                s(&dir.path().join("no.raw"))
            ),
            "vbmq: --disk path:",
        ),
        (
            format!("socket={},null=1G", s(&img)),
            "vbmq: --disk socket:",
        ),
        (
            format!("socket={},rbd=rbd/vm", s(&run.join("x.sock"))),
            "vbmq: --disk rbd: a confined vbmq adds an RBD disk at run time only on a cluster",
        ),
        ("nonsense".to_string(), "vbmq: --disk"),
    ];
    for (spec, expected) in &cases {
        let out = ctl(&control, &["add-disk", spec]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{spec}: {stderr}");
        assert!(stderr.starts_with(expected), "{spec}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{spec}: {stderr}");
        assert!(daemon.alive());
    }
    // The same socket twice.
    let x = run.join("x.sock");
    let spec = format!("socket={},null=1G", s(&x));
    ctl_json(&control, &["add-disk", &spec]);
    let out = ctl(&control, &["add-disk", &spec]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("given to two disks"));
    // The control socket's own path: it would be taken from the control server.
    let out = ctl(
        &control,
        &["add-disk", &format!("socket={},null=1G", s(&control))],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the control socket (--control)"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(ctl(&control, &["list"]).status.success());
    let out = ctl(&control, &["remove-disk", s(&run.join("none.sock"))]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("vbmq: no disk on {}\n", s(&run.join("none.sock")))
    );
    // The disk that was added still serves.
    let mut client = Client::connect(&x, 1, false).expect("connect");
    assert_eq!(client.capacity(), 1 << 30);
    assert_eq!(client.read(0, 0, 4096).0, 0);
    assert!(daemon.terminate().success());
}

/// One request line on a fresh connection; the reply line.
fn raw(control: &Path, bytes: &[u8]) -> Value {
    let mut stream = UnixStream::connect(control).expect("connect");
    stream.write_all(bytes).expect("send");
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).expect("reply");
    serde_json::from_str(&line).expect("JSON reply")
}

#[test]
fn malformed_huge_and_slow_requests_get_errors_and_stall_no_one() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), &[]);
    let mode = std::fs::metadata(&control).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(dir.path().join("run"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    for (request, error) in [
        (&b"not json\n"[..], "malformed request"),
        (b"[1,2]\n", "a request is a JSON object"),
        (b"{\"command\":\"format-c\"}\n", "unknown command"),
        (
            b"{\"version\":2,\"command\":\"list\"}\n",
            "unsupported version",
        ),
        (b"{\"command\":\"add-disk\"}\n", "missing string \"spec\""),
    ] {
        let reply = raw(&control, request);
        assert_eq!(reply["ok"], false, "{reply}");
        assert_eq!(reply["version"], 1);
        let text = reply["error"].as_str().expect("error text");
        assert!(text.contains(error), "{text}");
    }
    // A slow client that never ends its line, then a huge one: other clients are answered.
    let mut slow = UnixStream::connect(&control).expect("connect");
    slow.write_all(b"{\"command\":").expect("send");
    let listed = ctl_json(&control, &["list"]);
    assert_eq!(listed, Value::Array(Vec::new()));
    let mut huge = UnixStream::connect(&control).expect("connect");
    let big = vec![b' '; 200 << 10];
    // The daemon may close before reading it all.
    let _ = huge.write_all(&big);
    let mut reply = String::new();
    let _ = BufReader::new(&huge).read_line(&mut reply);
    let reply: Value = serde_json::from_str(&reply).expect("JSON reply");
    assert!(
        reply["error"]
            .as_str()
            .unwrap_or("")
            .contains("longer than"),
        "{reply}"
    );
    let mut rest = Vec::new();
    assert_eq!(huge.read_to_end(&mut rest).unwrap_or(0), 0, "closed after");
    // The slow client is given up on, with a reason.
    let mut reply = String::new();
    BufReader::new(&slow).read_line(&mut reply).expect("reply");
    assert!(reply.contains("no complete request"), "{reply}");
    // A request per line, several on one connection.
    let mut stream = UnixStream::connect(&control).expect("connect");
    stream
        .write_all(b"{\"command\":\"list\"}\n{\"version\":1,\"command\":\"stats\"}\n")
        .expect("send");
    let mut lines = BufReader::new(stream).lines();
    for _ in 0..2 {
        let reply: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(reply["ok"], true, "{reply}");
    }
    daemon.terminate_alive();
}

#[test]
fn list_and_stats_have_their_documented_shape() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.sock");
    let spec_a = format!("socket={},null=1G,queues=2", s(&a));
    let (daemon, control) = serve(dir.path(), std::slice::from_ref(&spec_a));
    let mut client = Client::connect(&a, 2, false).expect("connect");
    assert_eq!(client.read(1, 0, 8192).0, 0);
    let listed = ctl_json(&control, &["list"]);
    assert_eq!(
        listed,
        serde_json::json!([{
            "kind": "disk", "socket": s(&a), "spec": spec_a, "size": 1u64 << 30, "queues": 2, "connected": true,
            "limits": {},
        }])
    );
    let stats = ctl_json(&control, &["stats"]);
    let queues = &stats[0]["queues"];
    assert_eq!(stats[0]["socket"], s(&a));
    assert_eq!(queues[0]["queue"], 0);
    assert_eq!(queues[1]["queue"], 1);
    assert_eq!(queues[1]["requests"], 1);
    assert_eq!(queues[1]["read_bytes"], 8192);
    assert_eq!(queues[1]["errors"], 0);
    assert_eq!(queues[1]["write_bytes"], 0);
    assert!(stats[0]["engine"].is_object());
    let out = ctl(&control, &["stats", s(&dir.path().join("none.sock"))]);
    assert_eq!(out.status.code(), Some(2));
    drop(client);
    assert!(daemon.terminate().success());
}
