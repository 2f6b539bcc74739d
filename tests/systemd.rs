//! Running under systemd: `READY=1` on `NOTIFY_SOCKET` once the disks' sockets listen, and a
//! disk socket's missing directory created (0755) as a fresh `/run/vbmq` needs.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::Daemon;

#[test]
fn ready_is_sent_once_the_sockets_listen_in_their_new_directory() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let socket = dir.path().join("run/vbmq/a.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args([
            "serve",
            "--disk",
            &format!("socket={},null=1G", socket.display()),
        ])
        .env("NOTIFY_SOCKET", &notify_path)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let daemon = Daemon { child };
    let mut buf = [0u8; 64];
    let n = notify.recv(&mut buf).expect("READY=1 within 20 s");
    assert_eq!(&buf[..n], b"READY=1\n");
    // Ready means listening: the socket is there, in the directory vbmq made.
    assert!(socket.exists());
    let mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(daemon.terminate().success());
}
