//! Run-time file disks on a vbmq started with its defaults (confined: Landlock and seccomp):
//! `vbmq ctl add-disk` opens the image and binds the socket, in a directory of the operator's
//! choice, and passes them over the control socket; vbmq serves them. Descriptors that are not
//! what the disk needs are refused one by one, and the daemon goes on.

use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};

use crate::common::ctl::{each_refused, ok};
use crate::common::run_time::{self, open};
use crate::common::{Client, ctl, image, pattern, s, serve_with_control as serve};
use serde_json::{Value, json};

#[test]
fn a_passed_image_and_socket_serve_io_that_reads_back_and_lands_in_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve(dir.path(), &[]);
    let file = image(dir.path(), "vm3.raw", 8 << 20, 7);
    // Outside the control socket's directory (DIR/run), which the daemon may not bind in.
    let socket = dir.path().join("elsewhere/vm3.sock");
    let spec = format!("socket={},path={},queues=2", s(&socket), s(&file));
    let out = ctl(&control, &["add-disk", &spec]);
    ok(&out);
    let added: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(added["socket"], s(&socket));
    assert_eq!(added["size"], 8 << 20);

    let mut client = Client::connect(&socket, 2, false).expect("connect");
    assert_eq!(client.capacity(), 8 << 20);
    // The image's own bytes come through.
    client.assert_reads(
        0,
        0,
        &pattern(7, 8 << 20)[..4096],
        "the image's first block",
    );
    for round in 0..16u64 {
        let offset = round * (256 << 10) + 4096;
        // Aligned (the O_DIRECT descriptor) and unaligned lengths (the buffered one).
        let len = if round % 2 == 0 { 64 << 10 } else { 3 * 512 };
        let data = pattern(100 + round, len);
        assert_eq!(client.write((round % 2) as usize, offset, &data), 0);
        let (ret, back) = client.read(1 - (round % 2) as usize, offset, len);
        assert_eq!(ret, 0, "read {round}");
        assert!(back == data, "round {round}: other data read back");
    }
    assert_eq!(client.flush(0), 0);
    let on_disk = std::fs::read(&file).unwrap();
    let offset = 4096usize;
    assert!(on_disk[offset..offset + (64 << 10)] == pattern(100, 64 << 10)[..]);
    drop(client);

    let out = ctl(&control, &["remove-disk", s(&socket)]);
    assert!(out.status.success(), "{out:?}");
    assert!(!socket.exists(), "the passed socket's file is left behind");
    daemon.terminate_alive();
}

#[test]
fn descriptors_that_are_not_what_the_disk_needs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path(), &[]);
    let a = image(dir.path(), "a.raw", 1 << 20, 1);
    let b = image(dir.path(), "b.raw", 1 << 20, 2);
    let sock_path = dir.path().join("d.sock");
    let listening = UnixListener::bind(&sock_path).unwrap();
    let (connected, _peer) = UnixStream::pair().unwrap();
    let spec = |extra: &str| format!("socket={},path={}{extra}", s(&sock_path), s(&a));
    let add =
        |spec: String, names: &[&str], fds: &[RawFd]| run_time::add(&control, &spec, names, fds);
    let dir_fd = open(dir.path(), false);
    let (a_rw, a_ro, b_rw) = (open(&a, true), open(&a, false), open(&b, true));
    let cases: Vec<(Value, &str)> = vec![
        // The daemon opens no image itself.
        (
            crate::common::control_request(
                &control,
                &json!({"command": "add-disk", "spec": spec(",direct=off")}),
                &[],
            ),
            "a confined vbmq opens no image at run time",
        ),
        (
            add(
                spec(",direct=off"),
                &["socket", "image"],
                &[listening.as_raw_fd(), dir_fd.as_raw_fd()],
            ),
            "not a regular file or a block device",
        ),
        (
            add(
                spec(",direct=off"),
                &["socket", "image"],
                &[connected.as_raw_fd(), a_rw.as_raw_fd()],
            ),
            "a socket that does not listen",
        ),
        (
            add(
                spec(",direct=off"),
                &["socket", "image"],
                &[a_rw.as_raw_fd(), a_rw.as_raw_fd()],
            ),
            "not a listening Unix stream socket: a regular file",
        ),
        (
            add(
                spec(",direct=off"),
                &["socket", "image"],
                &[listening.as_raw_fd(), a_ro.as_raw_fd()],
            ),
            "not opened read-write",
        ),
        (
            add(
                spec(",direct=off,readonly=on"),
                &["socket", "image"],
                &[listening.as_raw_fd(), a_rw.as_raw_fd()],
            ),
            "not opened read-only",
        ),
        (
            add(
                spec(",direct=off"),
                &["socket", "image"],
                &[listening.as_raw_fd()],
            ),
            "2 descriptor(s) named, 1 passed",
        ),
        (
            add(spec(",direct=off"), &["socket"], &[listening.as_raw_fd()]),
            "a confined vbmq opens no image at run time",
        ),
    ];
    let mut cases = cases;
    // Two different files as the buffered and O_DIRECT descriptors (where O_DIRECT opens).
    let direct_works = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&b)
        .is_ok();
    if direct_works {
        let b_direct = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(&b)
            .expect("open");
        cases.push((
            add(
                spec(""),
                &["socket", "image", "image-direct"],
                &[
                    listening.as_raw_fd(),
                    a_rw.as_raw_fd(),
                    b_direct.as_raw_fd(),
                ],
            ),
            "different files",
        ));
    }
    each_refused(&cases, &mut daemon);
    // A good set after the refusals is served.
    let reply = add(
        spec(",direct=off"),
        &["socket", "image"],
        &[listening.as_raw_fd(), b_rw.as_raw_fd()],
    );
    assert_eq!(reply["ok"], true, "{reply}");
    let mut client = Client::connect(&sock_path, 1, false).expect("connect");
    client.assert_reads(0, 0, &pattern(2, 4096), "b.raw's bytes");
    drop(client);
    assert!(daemon.terminate().success());
}
