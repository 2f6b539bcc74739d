//! `vbmq image create` against `qemu-img create -f qcow2` with the same options: `qemu-img
//! check` finds vbmq's image clean, and `qemu-img info` reads it as it reads QEMU's; vbmq then
//! serves it and QEMU reads what the guest wrote.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::tool::run_tool as run;
use common::{Client, Daemon, pattern, s};
use serde_json::Value;

fn vbmq_image(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("image")
        .args(args)
        .output()
        .unwrap()
}

/// What `qemu-img info` says of `image` that the options decide (not the file's length).
fn info(image: &Path) -> Value {
    let info: Value =
        serde_json::from_str(&run("qemu-img", &["info", "--output=json", s(image)])).unwrap();
    serde_json::json!({
        "format": info["format"],
        "virtual-size": info["virtual-size"],
        "cluster-size": info["cluster-size"],
        "backing-filename": info["backing-filename"],
        "backing-filename-format": info["backing-filename-format"],
        "full-backing-filename": info["full-backing-filename"],
        "format-specific": info["format-specific"],
    })
}

#[test]
fn vbmq_image_create_makes_what_qemu_img_create_makes() {
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    std::fs::create_dir(&images).unwrap();
    std::fs::write(images.join("base.raw"), pattern(1, 3 << 20)).unwrap();
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            s(&images.join("golden.qcow2")),
            "5M",
        ],
    );
    // vbmq's options, qemu-img's options, qemu-img's size.
    let cases: &[(&[&str], &[&str], Option<&str>)] = &[
        (&["--size", "1G"], &[], Some("1G")),
        (&["--size", "1000000"], &[], Some("1000000")),
        (
            &["--size", "8G", "--cluster-size", "2M"],
            &["-o", "cluster_size=2M"],
            Some("8G"),
        ),
        // Many refcount blocks and L1 clusters.
        (
            &["--size", "100G", "--cluster-size", "512"],
            &["-o", "cluster_size=512"],
            Some("100G"),
        ),
        (
            &["--backing", "base.raw"],
            &["-b", "base.raw", "-F", "raw"],
            None,
        ),
        (
            &[
                "--backing",
                "golden.qcow2",
                "--backing-format",
                "qcow2",
                "--size",
                "7M",
            ],
            &["-b", "golden.qcow2", "-F", "qcow2"],
            Some("7M"),
        ),
    ];
    for (i, (ours, theirs, size)) in cases.iter().enumerate() {
        let vbmq = images.join(format!("v{i}.qcow2"));
        let qemu = images.join(format!("q{i}.qcow2"));
        let mut args = vec!["create", s(&vbmq)];
        args.extend(*ours);
        let out = vbmq_image(&args);
        assert!(out.status.success(), "{ours:?}: {out:?}");
        let mut args = vec!["create", "-q", "-f", "qcow2"];
        args.extend(*theirs);
        args.push(s(&qemu));
        args.extend(*size);
        run("qemu-img", &args);
        run("qemu-img", &["check", s(&vbmq)]);
        assert_eq!(info(&vbmq), info(&qemu), "{ours:?}");
        assert!(
            info(&vbmq)["full-backing-filename"]
                .as_str()
                .is_none_or(|f| f.starts_with(s(&images))),
            "the backing file is named relative to the image"
        );
    }
}

/// An image vbmq made over a backing file: vbmq serves it, the guest writes, and QEMU reads
/// the backing file's bytes under the guest's, with `qemu-img check` clean.
#[test]
fn an_image_vbmq_creates_is_served_and_qemu_reads_what_the_guest_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let base = pattern(2, 4 << 20);
    std::fs::write(dir.path().join("base.raw"), &base).unwrap();
    let top = dir.path().join("top.qcow2");
    let out = vbmq_image(&[
        "create",
        s(&top),
        "--backing",
        "base.raw",
        "--cluster-size",
        "4K",
    ]);
    assert!(out.status.success(), "{out:?}");
    let socket = dir.path().join("top.sock");
    let daemon = Daemon::start(&[format!("socket={},path={}", s(&socket), s(&top))]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let written = pattern(3, 9 << 10);
    assert_eq!(client.write(0, (1 << 20) + 1024, &written), 0);
    assert_eq!(client.flush(0), 0);
    let (ret, head) = client.read(0, 0, 8192);
    assert_eq!(ret, 0);
    assert!(head == base[..8192], "the backing file's bytes");
    drop(client);
    assert!(daemon.terminate().success());
    run("qemu-img", &["check", s(&top)]);
    let raw = dir.path().join("top.raw");
    run("qemu-img", &["convert", "-O", "raw", s(&top), s(&raw)]);
    let mut expected = base;
    expected[(1 << 20) + 1024..][..written.len()].copy_from_slice(&written);
    assert!(
        std::fs::read(&raw).unwrap() == expected,
        "QEMU reads other bytes"
    );
}

#[test]
fn what_cannot_be_made_is_refused_with_the_reason_and_nothing_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("existing.qcow2");
    std::fs::write(&existing, b"keep").unwrap();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["create", s(&existing), "--size", "1G"], 1, "File exists"),
        (
            &[
                "create",
                "new.qcow2",
                "--size",
                "1G",
                "--cluster-size",
                "3000",
            ],
            1,
            "power of two",
        ),
        (
            &[
                "create",
                "new.qcow2",
                "--size",
                "8T",
                "--cluster-size",
                "512",
            ],
            1,
            "too large",
        ),
        (
            &["create", "new.qcow2", "--backing", "missing.raw"],
            1,
            "missing.raw",
        ),
        (&["create", "new.qcow2"], 2, "--size"),
    ];
    for (args, status, reason) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
            .current_dir(dir.path())
            .arg("image")
            .args(*args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*status), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    assert!(!dir.path().join("new.qcow2").exists());
}
