//! Shares managed as disks are: `vbmq ctl list`, `stats` and `/metrics` show them, and
//! `vbmq ctl add-fs` and `remove-fs` add and remove them on a confined vbmq, the directory and
//! the listening socket handed over as descriptors. Driven through real sockets by the
//! user-space virtio-fs client.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::ctl::{free_port, http_get, sample};
use crate::common::serve::serve_with_fs_root;
use crate::common::{Serve, ctl, ctl_json, s};
use serde_json::{Value, json};
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, EntryOut, Opcode, OpenOut, ROOT_ID, ReadIn, WriteIn};
use vm_memory::ByteValued;

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
    let (out, body) = crate::common::fs::create(client, name, libc::S_IFREG | 0o644);
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
    let daemon = Serve::new()
        .control(&control)
        .opt("--metrics", format!("127.0.0.1:{port}"))
        .disk(&format!("socket={},null=1G", s(&disk)))
        .fs(&fs_spec)
        .start();

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

    let text = http_get(port, "/metrics");
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

/// A confined vbmq (seccomp and Landlock as by default) serves a share `vbmq ctl add-fs` hands
/// it, with its socket where the operator names it (not the control socket's directory): a
/// client reads and writes the host's files through it; `remove-fs` disconnects the client
/// and removes the socket; the same share can be added again.
#[test]
fn a_share_added_at_run_time_serves_files_on_a_confined_vbmq_until_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve_with_fs_root(dir.path());
    let shared = dir.path().join("roots/vm1");
    std::fs::create_dir_all(shared.join("sub")).unwrap();
    std::fs::write(shared.join("sub/hello"), b"hello from the host").unwrap();
    std::fs::write(shared.join("hello"), b"top").unwrap();
    let socket = dir.path().join("sockets/vm1-fs.sock");
    let spec = format!(
        "socket={},dir={},tag=vm1,mode=event",
        s(&socket),
        s(&shared)
    );
    for round in 0..2 {
        let added = ctl_json(&control, &["add-fs", &spec]);
        assert_eq!(
            added,
            json!({"socket": s(&socket), "spec": spec, "tag": "vm1", "dir": s(&shared),
                "queues": 1, "readonly": false, "connected": false})
        );
        assert_eq!(listed(&control, &socket).expect("listed")["kind"], "fs");

        let mut client = FsClient::connect(&socket).expect("connect to the added share");
        assert_eq!(read_file(&mut client, "hello"), b"top");
        let sub = client.lookup(ROOT_ID, "sub").expect("lookup sub").nodeid;
        let hello = client.lookup(sub, "hello").expect("lookup sub/hello");
        assert_eq!(hello.attr.size, 19);
        // The root, opened `O_PATH` by `vbmq ctl`, is listed through its /proc link.
        let open = fuse::OpenIn {
            flags: (libc::O_RDONLY | libc::O_DIRECTORY) as u32,
            fuse_flags: 0,
        };
        let (out, _) = client
            .call(Opcode::Opendir, ROOT_ID, fuse::args(&open), &[], 4096)
            .expect("opendir");
        assert_eq!(out.error, 0, "OPENDIR of the root");
        let name = format!("written-{round}");
        write_file(&mut client, &name, b"from the guest");
        assert_eq!(
            std::fs::read(shared.join(&name)).unwrap(),
            b"from the guest"
        );
        assert_eq!(read_file(&mut client, &name), b"from the guest");
        wait_connected(&control, &socket, true);
        let stats = ctl_json(&control, &["stats", s(&socket)]);
        assert_eq!(stats[0]["kind"], "fs");
        assert!(
            stats[0]["queues"][1]["requests"].as_u64() >= Some(10),
            "{stats}"
        );

        let out = ctl(&control, &["remove-fs", s(&socket)]);
        assert!(out.status.success(), "{out:?}");
        assert!(
            client.closed_by_backend(Duration::from_secs(20)),
            "round {round}: the client stayed connected after remove-fs"
        );
        assert!(!socket.exists(), "round {round}: socket left behind");
        let lock = dir.path().join("sockets/vm1-fs.sock.lock");
        assert!(!lock.exists(), "round {round}: lock file left behind");
        assert_eq!(ctl_json(&control, &["list"]), json!([]));
        let out = ctl(&control, &["remove-fs", s(&socket)]);
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("vbmq: no share on {}\n", s(&socket))
        );
    }
    daemon.terminate_alive();
}

/// Sends an `add-fs` request for `spec` with `fds` attached, as a client other than `vbmq ctl`
/// could; returns the reply.
fn raw_add_fs(control: &Path, spec: &str, fds: &[std::os::fd::RawFd]) -> Value {
    crate::common::control_request(control, &json!({"command": "add-fs", "spec": spec}), fds)
}

/// What `add-fs` cannot serve is refused, one line naming what is wrong, and the daemon goes
/// on: a file given as the directory, a directory outside every `--fs-root`, and, from a raw
/// client, a descriptor that is not a directory, a socket that does not listen, or none.
#[test]
fn add_fs_refuses_what_it_cannot_serve_with_a_clear_message() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve_with_fs_root(dir.path());
    let shared = dir.path().join("roots/vm1");
    std::fs::create_dir_all(&shared).unwrap();
    let file = dir.path().join("roots/file");
    std::fs::write(&file, b"not a directory").unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let socket = dir.path().join("sockets/fs.sock");
    let spec = |d: &Path| format!("socket={},dir={},tag=t", s(&socket), s(d));

    let refused = |args: &[&str]| {
        let out = ctl(&control, args);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let error = refused(&["add-fs", &spec(&file)]);
    assert_eq!(
        error,
        format!(
            "vbmq: --fs dir: {}: Not a directory (os error 20)\n",
            s(&file)
        )
    );
    let error = refused(&["add-fs", &spec(&outside)]);
    assert_eq!(
        error,
        format!(
            "vbmq: --fs dir: {} is not beneath an --fs-root ({})\n",
            s(&outside),
            s(&dir.path().join("roots"))
        )
    );
    assert!(!socket.exists(), "a refused add-fs left its socket behind");
    let error = refused(&[
        "add-fs",
        &format!("socket=fs.sock,dir={},tag=t", s(&shared)),
    ]);
    assert_eq!(
        error,
        "vbmq: --fs socket: must be an absolute path at run time (vbmq ctl and vbmq have \
         working directories of their own)\n"
    );

    // A raw client's descriptors, each checked for what it should be.
    let directory = std::fs::File::open(&shared).unwrap();
    let regular = std::fs::File::open(&file).unwrap();
    let lock = tempfile::tempfile().unwrap();
    let listener =
        std::os::unix::net::UnixListener::bind(dir.path().join("raw.sock")).expect("bind");
    let (connected, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let error = |reply: Value| {
        assert_eq!(reply["ok"], false, "{reply}");
        reply["error"].as_str().expect("an error").to_string()
    };
    let raw_spec = spec(&shared);
    let fds = [regular.as_raw_fd(), listener.as_raw_fd(), lock.as_raw_fd()];
    assert_eq!(
        error(raw_add_fs(&control, &raw_spec, &fds)),
        "--fs dir: the descriptor passed is not a directory: a regular file"
    );
    let fds = [
        directory.as_raw_fd(),
        connected.as_raw_fd(),
        lock.as_raw_fd(),
    ];
    assert_eq!(
        error(raw_add_fs(&control, &raw_spec, &fds)),
        "--fs socket: the descriptor passed is not a listening Unix stream socket: a socket \
         that does not listen"
    );
    let fds = [directory.as_raw_fd(), regular.as_raw_fd(), lock.as_raw_fd()];
    assert_eq!(
        error(raw_add_fs(&control, &raw_spec, &fds)),
        "--fs socket: the descriptor passed is not a listening Unix stream socket: a regular file"
    );
    // A listening socket named as the control socket: the name is the control socket's.
    let control_spec = format!("socket={},dir={},tag=t", s(&control), s(&shared));
    let fds = [
        directory.as_raw_fd(),
        listener.as_raw_fd(),
        lock.as_raw_fd(),
    ];
    assert_eq!(
        error(raw_add_fs(&control, &control_spec, &fds)),
        format!(
            "--fs socket: {} is given to a share and to the control socket (--control)",
            s(&control)
        )
    );
    // Eleven descriptors: more than a request may carry.
    let eleven = [directory.as_raw_fd(); 11];
    assert_eq!(
        error(raw_add_fs(&control, &raw_spec, &eleven)),
        "more than 10 descriptors with a request"
    );
    let relative = format!("socket=fs.sock,dir={},tag=t", s(&shared));
    let fds = [
        directory.as_raw_fd(),
        listener.as_raw_fd(),
        lock.as_raw_fd(),
    ];
    assert!(
        error(raw_add_fs(&control, &relative, &fds))
            .starts_with("--fs socket: must be an absolute"),
    );
    assert!(
        error(raw_add_fs(&control, &raw_spec, &[]))
            .starts_with("add-fs: send the share's directory, its listening socket"),
    );
    assert_eq!(ctl_json(&control, &["list"]), json!([]));
    // And the daemon still adds a good share.
    let added = ctl_json(&control, &["add-fs", &raw_spec]);
    assert_eq!(added["socket"], s(&socket));
    let mut client = FsClient::connect(&socket).expect("connect");
    assert!(client.lookup(ROOT_ID, "nothing").is_err());
    drop(client);
    daemon.terminate_alive();
    // Outside the directories the confinement lets vbmq remove files in, the socket stays at
    // exit, served by no one (the next bind replaces it).
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());
}

/// `fs-root` in the configuration file is `--fs-root`.
#[test]
fn the_configuration_files_fs_root_lets_add_fs_share_beneath_it() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/ctl.sock");
    let roots = dir.path().join("roots");
    std::fs::create_dir_all(roots.join("vm1")).unwrap();
    std::fs::write(roots.join("vm1/hello"), b"configured").unwrap();
    let config = dir.path().join("etc/vbmq.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    std::fs::write(
        &config,
        format!(
            "control = \"{}\"\nfs-root = [\"{}\"]\n",
            s(&control),
            s(&roots)
        ),
    )
    .unwrap();
    let daemon = Serve::config(&config, &[&control]).start();
    let socket = dir.path().join("run/vm1-fs.sock");
    let spec = format!("socket={},dir={},tag=t", s(&socket), s(&roots.join("vm1")));
    ctl_json(&control, &["add-fs", &spec]);
    let mut client = FsClient::connect(&socket).expect("connect");
    assert_eq!(read_file(&mut client, "hello"), b"configured");
    drop(client);
    assert!(daemon.terminate().success());
    // In the control socket's directory, vbmq removes the socket at exit itself.
    assert!(!socket.exists(), "socket left behind at exit");
}
