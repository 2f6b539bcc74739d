//! `vbmq vhost-user-blk`: one disk served with QEMU's vhost-user backend program conventions
//! (`--socket-path` or `--fd`, `--blk-file`, `--read-only`, `--print-capabilities`), as a
//! management stack that found vbmq through `contrib/vhost-user/50-vbmq-blk.json` starts it.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{Client, Daemon, image, pattern, wait_for};

const SIZE: usize = 16 << 20;

fn vbmq() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("vhost-user-blk").stdin(Stdio::null());
    cmd
}

/// `vbmq vhost-user-blk --socket-path=SOCKET` with the arguments `args` adds, once it listens.
fn serve_on(socket: &Path, args: impl FnOnce(&mut Command)) -> Daemon {
    let mut command = vbmq();
    command.arg(format!("--socket-path={}", socket.display()));
    args(&mut command);
    let child = command.spawn().unwrap();
    let daemon = Daemon { child };
    wait_for(socket);
    daemon
}

/// Writes a pattern at 1 MiB, reads it back, and checks it reached the image file.
fn write_and_verify(socket: &Path, file: &Path) {
    let mut client = Client::connect(socket, 1, false).expect("connect");
    assert_eq!(client.capacity(), SIZE as u64);
    let data = pattern(7, 64 << 10);
    assert_eq!(client.write(0, 1 << 20, &data), 0);
    assert_eq!(client.flush(0), 0);
    client.assert_reads(0, 1 << 20, &data, "read back other data than was written");
    drop(client);
    let on_disk = std::fs::read(file).unwrap();
    assert!(on_disk[1 << 20..(1 << 20) + data.len()] == data[..]);
}

#[test]
fn socket_path_and_blk_file_serve_io_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "vm1.raw", SIZE, 1);
    let socket = dir.path().join("vm1.sock");
    let daemon = serve_on(&socket, |cmd| {
        cmd.arg("--blk-file").arg(&file).args(["--queues", "2"]);
    });
    write_and_verify(&socket, &file);
    assert!(daemon.terminate().success());
    assert!(!socket.exists(), "vbmq removes the socket it bound");
}

#[test]
fn an_inherited_listening_socket_serves_io() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "vm1.raw", SIZE, 2);
    let socket = dir.path().join("vm1.sock");
    // As libvirt does: the launcher binds and listens, the backend gets the descriptor.
    let listener = UnixListener::bind(&socket).unwrap();
    let fd = listener.as_raw_fd();
    let log = dir.path().join("vbmq.log");
    let mut cmd = vbmq();
    cmd.arg("--fd=3")
        .arg(format!("--blk-file={}", file.display()))
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&log).unwrap());
    // SAFETY: between fork and exec, only fcntl and dup2: the socket at 3, inherited.
    unsafe {
        cmd.pre_exec(move || {
            let copy = libc::fcntl(fd, libc::F_DUPFD, 100);
            if copy < 0 || libc::dup2(copy, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    // Only vbmq listens now; a connection waits in the backlog until it accepts.
    drop(listener);
    write_and_verify(&socket, &file);
    assert!(daemon.terminate().success());
    assert!(
        socket.exists(),
        "vbmq leaves an inherited socket's file to its owner"
    );
    // The disk is named by the path the inherited socket is bound to.
    let text = std::fs::read_to_string(&log).unwrap();
    let named = format!("serving socket={},path=", socket.display());
    assert!(text.contains(&named), "{text}");
}

#[test]
fn read_only_refuses_writes_and_keeps_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let file = image(dir.path(), "vm1.raw", SIZE, 3);
    let socket = dir.path().join("vm1.sock");
    let daemon = serve_on(&socket, |cmd| {
        cmd.arg(format!("--blk-file={}", file.display()))
            .arg("--read-only");
    });
    // The device offers VIRTIO_BLK_F_RO: libblkio refuses to open it writable.
    let e = Client::connect(&socket, 1, false)
        .err()
        .expect("connected writable");
    assert_eq!(e.errno().raw_os_error(), libc::EROFS, "{e:?}");
    let mut client = Client::connect_with(&socket, 1, false, true).expect("connect");
    let (ret, old) = client.read(0, 0, 8192);
    assert_eq!(ret, 0);
    assert!(old == pattern(3, SIZE)[..8192]);
    assert_ne!(
        client.write(0, 0, &pattern(4, 8192)),
        0,
        "a write succeeded"
    );
    drop(client);
    assert!(std::fs::read(&file).unwrap() == pattern(3, SIZE));
    assert!(daemon.terminate().success());
}

/// `--print-capabilities` is QEMU's JSON for a `block` backend, also when started by the
/// descriptor's name; an option it does not take is refused with one line and status 1.
#[test]
fn print_capabilities_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("vbmq-vhost-user-blk");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vbmq"), &link).unwrap();
    for mut cmd in [vbmq(), Command::new(&link)] {
        let out = cmd.arg("--print-capabilities").output().unwrap();
        assert!(out.status.success());
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["type"], "block");
        assert_eq!(
            json["features"],
            serde_json::json!(["blk-file", "read-only"])
        );
    }
    let file = image(dir.path(), "vm1.raw", 1 << 20, 5);
    let socket = dir.path().join("vm1.sock");
    for args in [
        vec!["--socket-path".into(), socket.display().to_string()],
        vec![
            "--socket-path".into(),
            socket.display().to_string(),
            format!("--blk-file={}", file.display()),
            "--shared-dir=/tmp".into(),
        ],
        // Descriptor 9 was not inherited: refused before vbmq opens anything of its own.
        vec!["--fd=9".into(), format!("--blk-file={}", file.display())],
    ] {
        let out = Command::new(&link).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    assert!(!socket.exists());
}

/// The descriptor scripts/install.sh installs is QEMU's form for a `block` backend.
#[test]
fn the_descriptor_is_a_block_backend() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/vhost-user/50-vbmq-blk.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(json["type"], "block");
    assert_eq!(json["binary"], "@BINARY@");
    assert!(json["description"].is_string());
}
