//! qcow2 golden images and chains made by `qemu-img` and `qemu-io` (never by vbmq) under a
//! thin disk (`base=`) and as run-time disks of a confined vbmq: what the guest reads equals
//! `qemu-img convert -O raw` of the image, byte for byte; BASE and every backing file stay as
//! they were.

mod common;

use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use common::ctl::{each_refused, ok};
use common::run_time::{add, fill_and_copy_on_read, open};
use common::tool::{qcow2_over, run_tool as run};
use common::{Client, ctl, pattern, s, serve_with_control};

const SIZE: usize = 4 << 20;
const BLOCK: usize = 64 << 10;

/// `qemu-io` commands on a qcow2 image.
fn qemu_io(image: &Path, commands: &[&str]) {
    let mut args = vec!["-f", "qcow2"];
    for c in commands {
        args.extend(["-c", c]);
    }
    args.push(s(image));
    run("qemu-io", &args);
}

/// What QEMU reads from `image`: `qemu-img convert -O raw`.
fn qemu_view(image: &Path) -> Vec<u8> {
    let out = image.with_extension("qemu.raw");
    run("qemu-img", &["convert", "-O", "raw", s(image), s(&out)]);
    std::fs::read(out).unwrap()
}

/// Every byte the disk on `socket` serves, in odd-sized reads that cross clusters and blocks.
fn read_all(socket: &Path) -> Vec<u8> {
    let mut client = Client::connect(socket, 1, false).unwrap();
    let len = usize::try_from(client.capacity()).unwrap();
    let mut out = Vec::with_capacity(len);
    let chunk = 3 * 4096 + 512;
    while out.len() < len {
        let n = (len - out.len()).min(chunk);
        let (ret, data) = client.read(0, out.len() as u64, n);
        assert_eq!(ret, 0, "read at {}", out.len());
        out.extend_from_slice(&data);
    }
    out
}

fn assert_same(what: &str, expected: &[u8], got: &[u8]) {
    assert_eq!(expected.len(), got.len(), "{what}: size");
    if let Some(at) = expected.iter().zip(got).position(|(a, b)| a != b) {
        panic!("{what}: differs from qemu-img's view at byte {at}");
    }
}

/// In `dir`: a raw file with zeroed stretches, and over it (named relative to it) a qcow2
/// golden image with data across clusters, zero clusters over the raw file's data, and holes
/// that read the raw file. Returns the golden image.
fn golden_over_raw(dir: &Path) -> PathBuf {
    let mut data = pattern(3, SIZE);
    data[SIZE / 4..SIZE / 2].fill(0);
    std::fs::write(dir.join("base.raw"), data).unwrap();
    let golden = dir.join("golden.qcow2");
    qcow2_over(&golden, "raw", "base.raw", &["-o", "cluster_size=65536"]);
    qemu_io(
        &golden,
        &[
            "write -P 0x11 60k 8k",
            "write -z 1M 128k",
            "write -P 0x12 2M 3k",
            "write -P 0x13 1536k 64k",
        ],
    );
    golden
}

fn files_of(paths: &[&Path]) -> Vec<Vec<u8>> {
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// A qcow2 BASE with a raw backing file of its own serves its guest's bytes: plain, with
/// copy-on-read, and filled in the background (DISK then holds the whole image); a write lands
/// in DISK over the rest of its block from BASE. Before, BASE was refused.
#[test]
fn a_qcow2_base_reads_as_qemu_reads_it_with_copy_on_read_fill_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    let golden = golden_over_raw(&images);
    let expected = qemu_view(&golden);
    let below = [golden.as_path(), &images.join("base.raw")];
    let before = files_of(&below);
    let disk = |name: &str, extra: &str| {
        let socket = dir.path().join(format!("{name}.sock"));
        let spec = format!(
            "socket={},path={},base={}{extra}",
            s(&socket),
            s(&dir.path().join(format!("{name}.raw"))),
            s(&golden)
        );
        (socket, spec)
    };
    let (plain, plain_spec) = disk("plain", "");
    let (read, read_spec) = disk("cor", ",base-copy-on-read=on");
    let (filled, filled_spec) = disk("filled", ",base-fill=on");
    let (daemon, control) = serve_with_control(dir.path(), &[plain_spec, read_spec, filled_spec]);

    assert_same("base=golden.qcow2", &expected, &read_all(&plain));
    fill_and_copy_on_read(&control, &filled, &read, &expected, BLOCK);
    assert_same("the copy-on-read disk", &expected, &read_all(&read));
    assert_same("the filled disk", &expected, &read_all(&filled));

    // Inside a block the golden image's data and its backing file's share.
    let written = pattern(9, 3 << 10);
    let mut client = Client::connect(&plain, 1, false).unwrap();
    assert_eq!(client.write(0, (62 << 10) + 512, &written), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    let mut after = expected.clone();
    after[(62 << 10) + 512..][..written.len()].copy_from_slice(&written);
    assert_same("after a write", &after, &read_all(&plain));
    daemon.terminate_alive();

    // DISK holds the whole image once filled; BASE and its backing file are unchanged.
    assert_same(
        "filled.raw",
        &expected,
        &std::fs::read(dir.path().join("filled.raw")).unwrap(),
    );
    assert!(
        files_of(&below) == before,
        "BASE or its backing file changed"
    );
}

/// What a qcow2 BASE cannot be is refused at start with the reason, naming `base`.
#[test]
fn a_qcow2_base_with_an_unreadable_chain_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let golden = dir.path().join("golden.qcow2");
    let vmdk = dir.path().join("missing.vmdk");
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-u",
            "-F",
            "vmdk",
            "-b",
            s(&vmdk),
            s(&golden),
            "4M",
        ],
    );
    let spec = |base: &Path| {
        format!(
            "socket={},path={},base={}",
            s(&dir.path().join("s.sock")),
            s(&dir.path().join("vm.raw")),
            s(base)
        )
    };
    let refused = common::serve::exits_2_at_start(&["--disk".to_string(), spec(&golden)]);
    assert!(
        refused.contains("--disk base") && refused.contains("missing.vmdk"),
        "{refused}"
    );
    std::fs::write(&vmdk, b"").unwrap();
    let refused = common::serve::exits_2_at_start(&["--disk".to_string(), spec(&golden)]);
    assert!(
        refused.contains("--disk base") && refused.contains("\"vmdk\" is not supported"),
        "{refused}"
    );
}

/// base.raw <- mid.qcow2 (extended L2) <- top.qcow2, each named relative to the image that
/// names it, with data, zero clusters and holes at each level.
fn three_deep(dir: &Path) -> PathBuf {
    let mut data = pattern(5, SIZE);
    data[SIZE - 200_000..].fill(0);
    std::fs::write(dir.join("base.raw"), data).unwrap();
    let mid = dir.join("mid.qcow2");
    qcow2_over(&mid, "raw", "base.raw", &["-o", "extended_l2=on"]);
    qemu_io(&mid, &["write -P 0x21 60k 8k", "write -z 1M 64k"]);
    let top = dir.join("top.qcow2");
    qcow2_over(&top, "qcow2", "mid.qcow2", &["-o", "cluster_size=4096"]);
    qemu_io(&top, &["write -P 0x31 62k 1k", "write -z 3M 8k"]);
    top
}

/// `vbmq ctl add-disk` on a confined vbmq: a qcow2 image over a 3-deep chain, and a thin disk
/// over that chain as its BASE, read as QEMU reads the chain; `ctl` opens every file of it and
/// vbmq serves what it was passed. A write reaches the top image, which `qemu-img check`
/// finds clean, and no file below it changes.
#[test]
fn a_qcow2_chain_added_to_a_confined_vbmq_reads_as_qemu_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    let top = three_deep(&images);
    let expected = qemu_view(&top);
    let below = [images.join("mid.qcow2"), images.join("base.raw")];
    let below: Vec<&Path> = below.iter().map(PathBuf::as_path).collect();
    let before = files_of(&below);
    let (daemon, control) = serve_with_control(dir.path(), &[]);

    let image_socket = dir.path().join("elsewhere/top.sock");
    let spec = format!("socket={},path={}", s(&image_socket), s(&top));
    ok(&ctl(&control, &["add-disk", &spec]));
    assert_same("path=top.qcow2", &expected, &read_all(&image_socket));

    let thin_socket = dir.path().join("elsewhere/thin.sock");
    let spec = format!(
        "socket={},path={},base={}",
        s(&thin_socket),
        s(&dir.path().join("thin.raw")),
        s(&top)
    );
    ok(&ctl(&control, &["add-disk", &spec]));
    assert_same("base=top.qcow2", &expected, &read_all(&thin_socket));
    ok(&ctl(&control, &["remove-disk", s(&thin_socket)]));

    let written = pattern(11, 5 << 10);
    let mut client = Client::connect(&image_socket, 1, false).unwrap();
    assert_eq!(client.write(0, 1 << 20, &written), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    ok(&ctl(&control, &["remove-disk", s(&image_socket)]));
    daemon.terminate_alive();
    let mut after = expected;
    after[1 << 20..][..written.len()].copy_from_slice(&written);
    assert_same("top.qcow2 after a write", &after, &qemu_view(&top));
    run("qemu-img", &["check", s(&top)]);
    assert!(files_of(&below) == before, "a file below the top changed");
}

/// A confined vbmq opens no backing file by name: a chain passed short, passed long, or with a
/// writable file, is refused with the reason, and the daemon goes on.
#[test]
fn a_chain_not_passed_whole_is_refused_by_a_confined_vbmq() {
    let dir = tempfile::tempdir().unwrap();
    let top = three_deep(dir.path());
    let expected = qemu_view(&top);
    let (mut daemon, control) = serve_with_control(dir.path(), &[]);
    let socket = dir.path().join("d.sock");
    let listening = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let spec = format!("socket={},path={},direct=off", s(&socket), s(&top));
    let image = open(&top, true);
    let mid = open(&dir.path().join("mid.qcow2"), false);
    let raw = open(&dir.path().join("base.raw"), false);
    let raw_rw = open(&dir.path().join("base.raw"), true);
    let add = |backing: &[RawFd]| {
        let mut names = vec!["socket", "image"];
        let mut fds = vec![listening.as_raw_fd(), image.as_raw_fd()];
        names.extend(backing.iter().map(|_| "backing"));
        fds.extend(backing);
        add(&control, &spec, &names, &fds)
    };
    let cases = vec![
        (
            add(&[]),
            "mid.qcow2: not passed: the whole backing chain is passed",
        ),
        (add(&[mid.as_raw_fd()]), "base.raw: not passed"),
        (
            add(&[mid.as_raw_fd(), raw.as_raw_fd(), raw.as_raw_fd()]),
            "1 more backing file(s) passed than the image's chain has",
        ),
        (
            add(&[mid.as_raw_fd(), raw_rw.as_raw_fd()]),
            "passed backing file: not opened read-only",
        ),
    ];
    each_refused(&cases, &mut daemon);
    // Passed whole, the same request serves the chain.
    let answer = add(&[mid.as_raw_fd(), raw.as_raw_fd()]);
    assert_eq!(answer["ok"], true, "{answer}");
    assert_same("passed whole", &expected, &read_all(&socket));
    drop(listening);
    daemon.terminate_alive();
}
