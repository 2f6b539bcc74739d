//! `vbmq ctl export-begin --writable` against the real `vbmq serve`, written by real NBD
//! clients (`qemu-img convert -n`, `nbdcopy`): a disk no guest runs on receives a whole
//! image through its stack (an encrypted disk from under its cipher: it stores the ciphertext
//! a mirror sends as it comes), and the first ring a guest starts ends the export before the
//! guest's first request.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Client, ctl, ctl_json, disk_spec, s, serve_with_control as serve};
use serde_json::Value;

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

/// `vbmq ctl ARGS`, which must succeed (export-end prints nothing).
fn ctl_json_or_nothing(control: &Path, args: &[&str]) {
    let out = ctl(control, args);
    assert!(
        out.status.success(),
        "vbmq ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
