//! `vbmq ctl export-begin --writable` against the real `vbmq serve`, written by real NBD
//! clients (`qemu-img convert -n`, `nbdcopy`): a disk no guest runs on receives a whole
//! image through its stack (an encrypted disk from under its cipher: it stores the ciphertext
//! a mirror sends as it comes), the first ring a guest starts ends the export before the
//! guest's first request, and the export takes one client at a time: the next is refused until
//! everything the last one sent is done.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Client, ctl, ctl_json, disk_spec, s, serve_with_control as serve};
use serde_json::Value;
use vbmq::nbd::client::{Client as NbdClient, ClientError, Command as NbdCommand};
use vbmq::nbd::wire::flag;

const SIZE: usize = 16 << 20;

/// The export's URI for libnbd and QEMU.
fn uri(socket: &Path) -> String {
    format!("nbd+unix:///?socket={}", s(socket))
}

/// Runs a client to its end: its stdout, or its stderr as the error.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/install-test-deps.sh installs it)"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A source image with data, a stretch of zeros (which qemu-img sends as WRITE_ZEROES) and
/// data again.
fn source(dir: &Path) -> std::path::PathBuf {
    let mut bytes = common::pattern(5, SIZE);
    bytes[4 << 20..9 << 20].fill(0);
    let path = dir.join("source.raw");
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `export-begin SOCKET unix:EXPORT --writable` is refused with `reason`.
fn refused_writable(control: &Path, socket: &Path, export: &Path, reason: &str) {
    let address = format!("unix:{}", s(export));
    let out = ctl(
        control,
        &["export-begin", s(socket), &address, "--writable"],
    );
    common::ctl::refused(&out, reason);
}

#[test]
fn a_writable_export_takes_a_whole_image_through_the_disk_stack() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let source = source(dir.path());
    let plain = common::image(dir.path(), "plain.raw", SIZE, 9);
    let secret = common::image(dir.path(), "secret.raw", SIZE, 10);
    let key = common::image(dir.path(), "key", 64, 77);
    let enciphered = common::sparse_image(dir.path(), "enciphered.raw", SIZE as u64);
    let (p, e) = (dir.path().join("p.sock"), dir.path().join("e.sock"));
    let c = dir.path().join("c.sock");
    let encrypted = |socket: &Path, image: &Path| disk_spec::encrypted(socket, image, &key);
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={}", s(&p), s(&plain)),
            encrypted(&e, &secret),
            encrypted(&c, &enciphered),
        ],
    );
    let p_export = dir.path().join("p.nbd");
    let p_address = format!("unix:{}", s(&p_export));
    let answer = ctl_json(&control, &["export-begin", s(&p), &p_address, "--writable"]);
    assert_eq!(answer["bytes"], SIZE as u64, "{answer}");
    let info: Value = serde_json::from_str(&run("nbdinfo", &["--json", &uri(&p_export)]).unwrap())
        .expect("nbdinfo's JSON");
    assert_eq!(info["exports"][0]["is_read_only"], false, "{info}");
    assert_eq!(info["exports"][0]["can_zero"], true, "{info}");
    run(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            s(&source),
            &uri(&p_export),
        ],
    )
    .unwrap();
    ctl_json_or_nothing(&control, &["export-end", s(&p), &p_address]);
    assert!(
        std::fs::read(&plain).unwrap() == std::fs::read(&source).unwrap(),
        "the image is what qemu-img wrote, zeros included"
    );

    // Encrypted: the export takes ciphertext (what a mirror of an encrypted disk sends: here
    // the source enciphered by another disk with the key) and stores it as it comes; a guest
    // with the key reads the plaintext.
    let source_bytes = std::fs::read(&source).unwrap();
    let mut writer = Client::connect(&c, 1, false).expect("connect");
    for (i, part) in source_bytes.chunks(1 << 20).enumerate() {
        assert_eq!(writer.write(0, (i << 20) as u64, part), 0);
    }
    assert_eq!(writer.flush(0), 0);
    let ciphertext = std::fs::read(&enciphered).unwrap();
    assert!(
        ciphertext[..1 << 20] != source_bytes[..1 << 20],
        "enciphered"
    );
    let e_export = dir.path().join("e.nbd");
    let e_address = format!("unix:{}", s(&e_export));
    ctl_json(&control, &["export-begin", s(&e), &e_address, "--writable"]);
    run("nbdcopy", &[s(&enciphered), &uri(&e_export)]).unwrap();
    let back = dir.path().join("back.raw");
    run("nbdcopy", &[&uri(&e_export), s(&back)]).unwrap();
    ctl_json_or_nothing(&control, &["export-end", s(&e), &e_address]);
    assert!(std::fs::read(&back).unwrap() == ciphertext, "read back");
    assert!(
        std::fs::read(&secret).unwrap() == ciphertext,
        "the image holds the ciphertext as it came"
    );
    let mut guest = Client::connect(&e, 1, false).expect("connect");
    let (ret, data) = guest.read(0, 1 << 20, 1 << 20);
    assert_eq!(ret, 0);
    assert!(
        data[..] == source_bytes[1 << 20..2 << 20],
        "the guest reads it"
    );
    assert!(daemon.alive());
}

#[test]
fn a_guest_starting_ends_the_writable_export_and_none_begins_after() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::image(dir.path(), "a.raw", SIZE, 3);
    let readonly = common::image(dir.path(), "r.raw", SIZE, 4);
    let (a, r) = (dir.path().join("a.sock"), dir.path().join("r.sock"));
    let (mut daemon, control) = serve(
        dir.path(),
        &[
            format!("socket={},path={}", s(&a), s(&image)),
            format!("socket={},path={},readonly=on", s(&r), s(&readonly)),
        ],
    );
    refused_writable(&control, &r, &dir.path().join("r.nbd"), "read-only");
    let export = dir.path().join("a.nbd");
    let address = format!("unix:{}", s(&export));
    ctl_json(&control, &["export-begin", s(&a), &address, "--writable"]);
    refused_writable(
        &control,
        &a,
        &dir.path().join("b.nbd"),
        "another writable export",
    );
    run("nbdinfo", &[&uri(&export)]).expect("served before the guest starts");
    // A frontend connects (as QEMU's -incoming does at start): the export goes on until a
    // ring starts, and ends before the guest's first request is served.
    let mut guest = Client::connect(&a, 1, false).expect("connect");
    let (ret, _) = guest.read(0, 0, 4096);
    assert_eq!(ret, 0);
    let gone = run("nbdinfo", &[&uri(&export)]);
    assert!(gone.is_err(), "the export ended when the guest started");
    refused_writable(
        &control,
        &a,
        &dir.path().join("c.nbd"),
        "a guest has started",
    );
    // The ended export's place is freed by export-end, as any export's.
    ctl_json_or_nothing(&control, &["export-end", s(&a), &address]);
    assert!(!export.exists());
    assert!(daemon.alive());
}

/// What the export says to a client while another is connected.
const BUSY: &str = "one client at a time";

/// Connects to the export at `socket` once the client before is gone (refused meanwhile).
fn connect_when_free(socket: &Path) -> NbdClient {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match NbdClient::connect_unix(socket.to_path_buf(), "") {
            Ok(client) => return client,
            Err(ClientError::Refused { message, .. })
                if message.contains(BUSY) && Instant::now() < deadline =>
            {
                // The last client's requests are still being answered: a condition polled.
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

/// A stopped mirror destination's connection, cut by the source, still holds the writes it had
/// buffered; a resumed mirror must not be served beside it (they could land after its copy).
#[test]
fn a_writable_export_takes_one_client_at_a_time_and_the_next_after_all_the_last_sent() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = common::sparse_image(dir.path(), "a.raw", SIZE as u64);
    let a = dir.path().join("a.sock");
    let (mut daemon, control) = serve(
        dir.path(),
        &[format!("socket={},path={}", s(&a), s(&image))],
    );
    let export = dir.path().join("a.nbd");
    let address = format!("unix:{}", s(&export));
    ctl_json(&control, &["export-begin", s(&a), &address, "--writable"]);
    let first = connect_when_free(&export);
    assert!(
        !first.info().has(flag::CAN_MULTI_CONN),
        "no multi-conn on a writable export"
    );
    match NbdClient::connect_unix(export.clone(), "") {
        Err(ClientError::Refused { message, .. }) => assert!(message.contains(BUSY), "{message}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a second client was taken while the first lives"),
    }
    // libnbd shows the refusal, not the server's message.
    let refused = run("nbdinfo", &[&uri(&export)]).expect_err("nbdinfo refused");
    assert!(refused.contains("opt_go"), "{refused}");
    // The first sends a burst of writes over one range and goes without their answers...
    let old = vec![0xaa; 1 << 20];
    for _ in 0..32 {
        first.submit(
            NbdCommand::Write {
                offset: 0,
                data: &old,
                fua: false,
            },
            Box::new(drop),
        );
    }
    drop(first);
    // ...and the next is taken only once they are all done: its write is the last.
    let second = connect_when_free(&export);
    second.write(0, &[0xbb; 1 << 20], false).expect("write");
    second.flush().expect("flush");
    drop(second);
    ctl_json_or_nothing(&control, &["export-end", s(&a), &address]);
    let bytes = std::fs::read(&image).unwrap();
    assert!(
        bytes[..1 << 20].iter().all(|&b| b == 0xbb),
        "a write of the client before landed after the next one's"
    );
    assert!(daemon.alive());
}

/// `vbmq ctl ARGS`, which must succeed (export-end prints nothing).
fn ctl_json_or_nothing(control: &Path, args: &[&str]) {
    let out = ctl(control, args);
    assert!(
        out.status.success(),
        "vbmq ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
