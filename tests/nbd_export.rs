//! `vbmq ctl export-begin`/`export-end` against the real `vbmq serve`, read by real NBD
//! clients (`qemu-img`, `nbdcopy` and `nbdinfo` from libnbd-bin): a full backup read through
//! the export while a writer never pauses is the disk at the instant of export-begin; a
//! hostile client (bad options, huge lengths, reads past the end, writes, disconnects
//! mid-reply, more connections than allowed) leaves vbmq serving its guests and its export.

mod common;
#[path = "common/stamp_writer.rs"]
mod stamp_writer;
#[path = "common/stamps.rs"]
mod stamps;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::ctl::ctl_json_or_null;
use common::tool::{nbd_uri as uri, run_tool as run};
use common::{Client, ctl, s, serve::serve_one};
use serde_json::Value;
use stamp_writer::Writer;
use stamps::{BLOCK, check_one_instant, stamped_image};

#[test]
fn a_full_backup_read_under_writes_is_the_disk_at_export_begin() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let blocks = 8192; // 32 MiB
    let image = dir.path().join("a.raw");
    stamped_image(&image, blocks);
    let (mut daemon, control, a) = serve_one(dir.path(), "a", &image);
    let export = dir.path().join("export.sock");
    let address = format!("unix:{}", s(&export));
    let writer = Writer::start(&a, blocks);
    writer.wait_writes(blocks / 4);
    let low = writer.done.load(Ordering::SeqCst);
    let answer = ctl_json_or_null(&control, &["export-begin", s(&a), &address]);
    let high = writer.started.load(Ordering::SeqCst);
    assert_eq!(answer["bytes"], blocks * BLOCK as u64, "{answer}");
    // The export's socket is the operator's only: 0600.
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&export).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the export's socket is 0600");
    // The writer overwrites every block after the instant (each saved first), and keeps
    // writing while both backups read.
    writer.wait_writes(blocks);
    let by_qemu = dir.path().join("by-qemu-img.raw");
    run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri(&export),
            s(&by_qemu),
        ],
    );
    let by_nbdcopy = dir.path().join("by-nbdcopy.raw");
    run("nbdcopy", &[&uri(&export), s(&by_nbdcopy)]);
    let (from, to) = check_one_instant(&by_qemu, blocks, low, high);
    eprintln!("writes started {low}..={high}, qemu-img's backup's instant {from}..={to}");
    assert!(
        std::fs::read(&by_qemu).unwrap() == std::fs::read(&by_nbdcopy).unwrap(),
        "two reads of one export differ"
    );
    let info = run("nbdinfo", &["--json", &uri(&export)]);
    let info: Value = serde_json::from_str(&info).expect("nbdinfo's JSON");
    let first = &info["exports"][0];
    assert_eq!(first["export-size"], blocks * BLOCK as u64, "{info}");
    assert_eq!(first["is_read_only"], true, "{info}");
    assert_eq!(first["can_multi_conn"], true, "{info}");
    let map = run("nbdinfo", &["--map", &uri(&export)]);
    assert!(map.contains("data"), "{map}");
    ctl_json_or_null(&control, &["export-end", s(&a), &address]);
    assert!(!export.exists(), "export-end removes the export's socket");
    let out = ctl(&control, &["export-end", s(&a), &address]);
    assert!(!out.status.success(), "a second export-end is refused");
    // The disk may be exported (or snapshotted) again.
    ctl_json_or_null(&control, &["export-begin", s(&a), &address]);
    ctl_json_or_null(&control, &["export-end", s(&a), &address]);
    writer.stop();
    assert!(daemon.alive());
}

/// TCP without TLS, bad addresses, and disks with no export (memory) are refused with a
/// reason, and nothing is left bound. (Encrypted disks export their plaintext: nbd_backup.rs.)
#[test]
fn tcp_bad_addresses_and_disks_without_exports_are_refused_with_a_reason() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::image(dir.path(), "a.raw", 1 << 20, 1);
    let (mut daemon, control, a) = serve_one(dir.path(), "a", &image);
    for (address, says) in [
        ("tcp:127.0.0.1:10809", "TLS"),
        ("nbd.sock", "unix:PATH"),
        ("unix:relative.sock", "absolute"),
    ] {
        let out = ctl(&control, &["export-begin", s(&a), address]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{address}: {stderr}");
        assert!(stderr.contains(says), "{address}: {stderr}");
    }
    let memory = dir.path().join("m.sock");
    ctl_json_or_null(
        &control,
        &["add-disk", &format!("socket={},mem=1M", s(&memory))],
    );
    let export = format!("unix:{}", s(&dir.path().join("m-export.sock")));
    let scratch = dir.path().to_str().unwrap();
    let out = ctl(
        &control,
        &[
            "export-begin",
            s(&memory),
            &export,
            "--scratch-dir",
            scratch,
        ],
    );
    assert!(!out.status.success(), "a memory disk has no export");
    // A file already at the address's path is refused and kept: a regular file, a live socket
    // (the control socket). Only a stale socket of the caller's is replaced (after a kill -9:
    // nbd_backup.rs).
    let file = dir.path().join("file");
    std::fs::write(&file, b"keep").unwrap();
    for taken in [&file, &control] {
        let out = ctl(
            &control,
            &["export-begin", s(&a), &format!("unix:{}", s(taken))],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: {stderr}", taken.display());
        assert!(stderr.contains("exists"), "{}: {stderr}", taken.display());
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    ctl_json_or_null(&control, &["list"]);
    assert!(daemon.alive());
}

/// A raw NBD client for the hostile cases.
struct Raw(UnixStream);

impl Raw {
    /// Connects and reads the server's greeting (18 bytes); `None` if the server closed.
    fn connect(socket: &Path) -> Option<Raw> {
        let mut stream = UnixStream::connect(socket).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .ok()?;
        common::nbd_wire::read_greeting(&mut stream).ok()?;
        Some(Raw(stream))
    }

    fn send(&mut self, bytes: &[u8]) {
        let _ = self.0.write_all(bytes);
    }

    fn option(&mut self, option: u32, data: &[u8]) {
        let mut out = b"IHAVEOPT".to_vec();
        out.extend_from_slice(&option.to_be_bytes());
        out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        out.extend_from_slice(data);
        self.send(&out);
    }

    /// Reads option replies up to the final one; returns its type.
    fn option_reply(&mut self) -> Option<u32> {
        loop {
            let mut head = [0; 20];
            self.0.read_exact(&mut head).ok()?;
            let kind = u32::from_be_bytes(head[12..16].try_into().unwrap());
            let len = u32::from_be_bytes(head[16..20].try_into().unwrap());
            let mut data = vec![0; len as usize];
            self.0.read_exact(&mut data).ok()?;
            // INFO, SERVER and META_CONTEXT come before the final reply.
            if !(2..=4).contains(&kind) {
                return Some(kind);
            }
        }
    }

    /// `NBD_OPT_STRUCTURED_REPLY` then `NBD_OPT_GO` on the default export.
    fn go(&mut self) {
        self.option(8, &[]);
        assert_eq!(self.option_reply(), Some(1));
        self.option(7, &[0, 0, 0, 0, 0, 0]);
        assert_eq!(self.option_reply(), Some(1), "GO");
    }

    fn request(&mut self, kind: u16, offset: u64, length: u32) {
        let mut out = 0x2560_9513u32.to_be_bytes().to_vec();
        out.extend_from_slice(&0u16.to_be_bytes());
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&7u64.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&length.to_be_bytes());
        self.send(&out);
    }

    /// Reads one structured reply chunk: its type and payload.
    fn chunk(&mut self) -> Option<(u16, Vec<u8>)> {
        let mut head = [0; 20];
        self.0.read_exact(&mut head).ok()?;
        assert_eq!(&head[..4], &0x668e_33efu32.to_be_bytes());
        let kind = u16::from_be_bytes([head[6], head[7]]);
        let len = u32::from_be_bytes(head[16..20].try_into().unwrap());
        let mut data = vec![0; len as usize];
        self.0.read_exact(&mut data).ok()?;
        Some((kind, data))
    }

    /// The error a reply carries (0: none).
    fn error(&mut self) -> u32 {
        let (kind, data) = self.chunk().expect("a reply");
        if kind & 0x8000 == 0 {
            return 0;
        }
        u32::from_be_bytes(data[..4].try_into().unwrap())
    }

    /// Whether the server closed the connection.
    fn closed(&mut self) -> bool {
        let mut byte = [0; 1];
        matches!(self.0.read(&mut byte), Ok(0) | Err(_))
    }
}

fn hello(raw: &mut Raw) {
    // Fixed newstyle, no zeroes.
    raw.send(&3u32.to_be_bytes());
}

#[test]
fn hostile_nbd_clients_leave_vbmq_serving_its_guests_and_its_export() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let size = 4 << 20;
    let image = common::image(dir.path(), "a.raw", size, 3);
    let (mut daemon, control, a) = serve_one(dir.path(), "a", &image);
    let export = dir.path().join("export.sock");
    ctl_json_or_null(
        &control,
        &["export-begin", s(&a), &format!("unix:{}", s(&export))],
    );

    // A bad option magic, and an option of 1 GiB: disconnected.
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.send(b"IHAVEOPX\0\0\0\x07\0\0\0\0");
    assert!(raw.closed(), "bad option magic");
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.send(b"IHAVEOPT\0\0\0\x07\x40\0\0\0");
    assert!(raw.closed(), "an option of 1 GiB");
    // Unknown client flags: disconnected.
    let mut raw = Raw::connect(&export).expect("served");
    raw.send(&0x8000_0003u32.to_be_bytes());
    assert!(raw.closed(), "unknown client flags");

    // Malformed options get errors and the negotiation goes on.
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.option(7, &[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        raw.option_reply(),
        Some(0x8000_0003),
        "a name longer than its option"
    );
    raw.option(7, &[0, 0, 0, 3, b'x', b'y', b'z', 0, 0]);
    assert_eq!(raw.option_reply(), Some(0x8000_0006), "an unknown export");
    raw.option(10, &[0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        raw.option_reply(),
        Some(0x8000_0003),
        "SET_META_CONTEXT before structured"
    );
    raw.option(0xdead, &[1, 2, 3]);
    assert_eq!(raw.option_reply(), Some(0x8000_0001), "an unknown option");
    raw.option(5, &[]);
    assert_eq!(raw.option_reply(), Some(0x8000_0002), "STARTTLS");
    raw.go();
    // Past the end, wrapping, too long, empty, a write, an unknown command, block status
    // without a context: errors, and the connection goes on.
    raw.request(0, size as u64 - 512, 1024);
    assert_eq!(raw.error(), 22, "a read past the end");
    raw.request(0, u64::MAX - 10, 4096);
    assert_eq!(raw.error(), 22, "a read whose end wraps");
    raw.request(0, 0, u32::MAX);
    assert_eq!(raw.error(), 22, "a read of 4 GiB");
    raw.request(0, 0, 0);
    assert_eq!(raw.error(), 22, "an empty read");
    let mut write = 0x2560_9513u32.to_be_bytes().to_vec();
    write.extend_from_slice(&[0, 0, 0, 1]);
    write.extend_from_slice(&[0; 8]);
    write.extend_from_slice(&[0; 8]);
    write.extend_from_slice(&4096u32.to_be_bytes());
    write.extend_from_slice(&[0xAB; 4096]);
    raw.send(&write);
    assert_eq!(raw.error(), 1, "a write to the read-only export");
    raw.request(99, 0, 512);
    assert_eq!(raw.error(), 22, "an unknown command");
    raw.request(7, 0, 512);
    assert_eq!(raw.error(), 22, "block status without a context");
    raw.request(4, size as u64, 512);
    assert_eq!(raw.error(), 22, "a trim past the end");
    raw.request(0, 0, 512);
    let (kind, data) = raw.chunk().expect("the read's reply");
    assert_eq!(kind, 1, "data");
    assert!(data[8..] == std::fs::read(&image).unwrap()[..512]);
    // A disconnect in the middle of a 4 MiB reply.
    raw.request(0, 0, 4 << 20);
    drop(raw);
    // A bad request magic: disconnected.
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.go();
    raw.send(&[0x42; 28]);
    assert!(raw.closed(), "bad request magic");

    // More connections than allowed: the others are closed at once, none crashes anything.
    let many: Vec<Option<Raw>> = (0..64).map(|_| Raw::connect(&export)).collect();
    let served = many.iter().filter(|r| r.is_some()).count();
    assert!(served <= 16, "{served} connections served at once");
    assert!(served > 0);
    drop(many);
    // The places are freed as their clients go: wait for one.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Command::new("nbdinfo")
        .arg(uri(&export))
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        assert!(
            Instant::now() < deadline,
            "the export serves no one after the flood"
        );
        std::thread::yield_now();
    }

    // The guest's disk serves throughout, and the export still is the instant.
    let mut client = Client::connect(&a, 1, false).expect("connect");
    assert_eq!(client.write(0, 0, &[0x5A; 4096]), 0);
    let (ret, back) = client.read(0, 0, 4096);
    assert_eq!(ret, 0);
    assert_eq!(back, vec![0x5A; 4096]);
    let backup = dir.path().join("backup.raw");
    run("nbdcopy", &[&uri(&export), s(&backup)]);
    assert!(std::fs::read(&backup).unwrap() == common::pattern(3, size));

    // A trim releases the whole 64 KiB blocks it covers (Proxmox's fleecing contract): a
    // read of them is refused, the rest still reads as the instant.
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.go();
    raw.request(4, 0, 64 << 10);
    assert_eq!(raw.error(), 0, "a trim of what was read");
    raw.request(0, 0, 512);
    assert_eq!(raw.error(), 1, "a read of a released block");
    raw.request(0, 64 << 10, 512);
    let (kind, data) = raw.chunk().expect("the read's reply");
    assert_eq!(kind, 1, "data");
    assert!(data[8..] == common::pattern(3, size)[64 << 10..(64 << 10) + 512]);

    // export-end disconnects a client in transmission; remove-disk ends the next export.
    let address = format!("unix:{}", s(&export));
    ctl_json_or_null(&control, &["export-end", s(&a), &address]);
    assert!(raw.closed(), "export-end disconnects its clients");
    ctl_json_or_null(&control, &["export-begin", s(&a), &address]);
    let mut raw = Raw::connect(&export).expect("served");
    hello(&mut raw);
    raw.go();
    ctl_json_or_null(&control, &["remove-disk", s(&a)]);
    assert!(raw.closed(), "remove-disk ends the disk's export");
    assert!(daemon.alive());
}
