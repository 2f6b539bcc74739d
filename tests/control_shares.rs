//! Shares managed as disks are: `vbmq ctl list`, `stats` and `/metrics` show them, and
//! `vbmq ctl add-fs` and `remove-fs` add and remove them on a confined vbmq, the directory and
//! the listening socket handed over as descriptors. Driven through real sockets by the
//! user-space virtio-fs client.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, ctl, wait_for};
use serde_json::{Value, json};
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, CreateIn, EntryOut, Opcode, OpenOut, ROOT_ID, ReadIn, WriteIn};
use vm_memory::ByteValued;

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn ctl_json(control: &Path, args: &[&str]) -> Value {
    let out = ctl(control, args);
    assert!(
        out.status.success(),
        "vbmq ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn metrics(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// The value of the sample line that starts with `prefix`, if there is one.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.trim().parse().ok())
}

/// The whole of the file `name` in the share's root, read through the share.
fn read_file(client: &mut FsClient, name: &str) -> Vec<u8> {
    let entry = client.lookup(ROOT_ID, name).expect("lookup");
    let fh = client
        .open(entry.nodeid, libc::O_RDONLY as u32)
        .expect("open");
    let read = ReadIn {
        fh,
        offset: 0,
        size: 64 << 10,
        ..ReadIn::default()
    };
    let (out, body) = client
        .call(
            Opcode::Read,
            entry.nodeid,
            fuse::args(&read),
            &[],
            16 + (64 << 10),
        )
        .expect("read");
    assert_eq!(out.error, 0, "READ of {name}");
    client.release(entry.nodeid, fh).expect("release");
    body
}

/// Creates the file `name` in the share's root with `data`, through the share.
fn write_file(client: &mut FsClient, name: &str, data: &[u8]) {
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    let (out, body) = client
        .call(
            Opcode::Create,
            ROOT_ID,
            fuse::args(&create),
            &[name.as_bytes()],
            4096,
        )
        .expect("create");
    assert_eq!(out.error, 0, "CREATE of {name}");
    let entry = EntryOut::from_slice(&body[..size_of::<EntryOut>()])
        .copied()
        .expect("entry");
    let open = OpenOut::from_slice(&body[size_of::<EntryOut>()..][..size_of::<OpenOut>()])
        .copied()
        .expect("open");
    let write = WriteIn {
        fh: open.fh,
        offset: 0,
        size: u32::try_from(data.len()).unwrap(),
        ..WriteIn::default()
    };
    let mut args = fuse::args(&write).to_vec();
    args.extend_from_slice(data);
    let (out, _) = client
        .call(Opcode::Write, entry.nodeid, &args, &[], 4096)
        .expect("write");
    assert_eq!(out.error, 0, "WRITE of {name}");
    client.release(entry.nodeid, open.fh).expect("release");
}

/// The entry of `socket` in `list`.
fn listed(control: &Path, socket: &Path) -> Option<Value> {
    let list = ctl_json(control, &["list"]);
    list.as_array()
        .expect("a list")
        .iter()
        .find(|d| d["socket"] == s(socket))
        .cloned()
}

/// Waits until `list` shows the device on `socket` with `connected`.
fn wait_connected(control: &Path, socket: &Path, connected: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let entry = listed(control, socket).expect("listed");
        if entry["connected"] == connected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "never connected={connected}: {entry}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A share given at start is in `list` beside a disk, and its queues' counters follow the
/// requests in `stats` and `/metrics`, with its kind.
#[test]
fn a_share_is_listed_counted_and_measured_beside_a_disk() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("hello"), b"hello from the host").unwrap();
    let control = dir.path().join("run/ctl.sock");
    let disk = dir.path().join("run/d.sock");
    let fs = dir.path().join("run/fs.sock");
    let fs_spec = format!("socket={},dir={},tag=docs,mode=event", s(&fs), s(&shared));
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("serve")
        .arg("--control")
        .arg(&control)
        .args(["--metrics", &format!("127.0.0.1:{port}")])
        .arg("--disk")
        .arg(format!("socket={},null=1G", s(&disk)))
        .arg("--fs")
        .arg(&fs_spec)
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn vbmq");
    let daemon = Daemon { child };
    for path in [&control, &disk, &fs] {
        wait_for(path);
    }

    let share = listed(&control, &fs).expect("the share is listed");
    assert_eq!(
        share,
        json!({"kind": "fs", "socket": s(&fs), "spec": fs_spec, "tag": "docs",
            "dir": s(&shared), "queues": 1, "readonly": false, "connected": false})
    );
    assert_eq!(listed(&control, &disk).expect("the disk")["kind"], "disk");

    let mut client = FsClient::connect(&fs).expect("connect to the share");
    assert_eq!(read_file(&mut client, "hello"), b"hello from the host");
    write_file(&mut client, "new", b"from the guest");
    assert_eq!(
        std::fs::read(shared.join("new")).unwrap(),
        b"from the guest"
    );
    wait_connected(&control, &fs, true);

    // INIT, LOOKUP, OPEN, READ, RELEASE, CREATE, WRITE, RELEASE: 8 on the request queue.
    let stats = ctl_json(&control, &["stats", s(&fs)]);
    assert_eq!(stats.as_array().map(Vec::len), Some(1), "{stats}");
    assert_eq!(stats[0]["kind"], "fs");
    assert_eq!(stats[0]["socket"], s(&fs));
    let queues = stats[0]["queues"].as_array().expect("queues");
    assert_eq!(
        queues.len(),
        2,
        "the high-priority queue and one request queue"
    );
    assert_eq!(queues[1]["queue"], 1);
    assert_eq!(queues[1]["requests"], 8, "{stats}");
    assert!(queues[1]["busy_passes"].as_u64() >= Some(1), "{stats}");
    assert!(queues[1]["passes"].as_u64() >= queues[1]["busy_passes"].as_u64());
    assert!(queues[1]["sleep_ms"].is_u64());
    let all = ctl_json(&control, &["stats"]);
    let kinds: Vec<&Value> = all.as_array().unwrap().iter().map(|d| &d["kind"]).collect();
    assert_eq!(kinds, [&json!("disk"), &json!("fs")]);

    let text = metrics(port);
    let labels = |queue: u32| format!("{{disk=\"{}\",kind=\"fs\",queue=\"{queue}\"}}", s(&fs));
    assert_eq!(
        sample(&text, &format!("vbmq_requests_total{}", labels(1))),
        Some(8.0),
        "{text}"
    );
    assert!(sample(&text, &format!("vbmq_busy_passes_total{}", labels(1))) >= Some(1.0));
    assert!(sample(&text, &format!("vbmq_passes_total{}", labels(0))).is_some());
    assert!(sample(&text, &format!("vbmq_sleep_seconds_total{}", labels(1))).is_some());
    // No byte, error or latency samples: a share has none of its own.
    let share_bytes = format!("vbmq_bytes_total{{disk=\"{}\"", s(&fs));
    assert!(!text.contains(&share_bytes), "{text}");
    let disk_reads = format!(
        "vbmq_requests_total{{disk=\"{}\",kind=\"disk\",queue=\"0\",op=\"read\"}}",
        s(&disk)
    );
    assert_eq!(sample(&text, &disk_reads), Some(0.0), "{text}");

    drop(client);
    wait_connected(&control, &fs, false);
    let out = ctl(&control, &["stats", s(&dir.path().join("none.sock"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no disk or share on"),
        "{out:?}"
    );
    assert!(daemon.terminate().success());
    assert!(!fs.exists(), "the share's socket left behind at exit");
}
