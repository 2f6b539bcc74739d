//! `socket-fd=`: a disk's listening socket inherited at start, as systemd socket activation
//! (`LISTEN_FDS`, `LISTEN_FDNAMES`, `LISTEN_PID`) and libvirt-style launchers hand it over, by
//! number or by name; vbmq binds nothing for it, serves I/O on it, and refuses a descriptor that
//! was not inherited.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use common::{Client, Daemon, ctl, pattern};

#[test]
fn inherited_sockets_by_number_and_by_name_serve_io() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.sock"), dir.path().join("b.sock"));
    let (la, lb) = (
        UnixListener::bind(&a).unwrap(),
        UnixListener::bind(&b).unwrap(),
    );
    let (fa, fb) = (la.as_raw_fd(), lb.as_raw_fd());
    let control = dir.path().join("run/ctl.sock");
    // `LISTEN_PID` is the pid vbmq runs as: the shell's, which execs it.
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        "LISTEN_PID=$$ exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_vbmq"),
    ])
    .arg("serve")
    .arg("--control")
    .arg(&control)
    .arg("--disk")
    .arg(format!("socket={},mem=64M,socket-fd=3", a.display()))
    .arg("--disk")
    .arg(format!("socket={},mem=16M,socket-fd=vm-b", b.display()))
    .env("LISTEN_FDS", "2")
    .env("LISTEN_FDNAMES", "vm-a:vm-b")
    .stdin(Stdio::null());
    // SAFETY: between fork and exec, only fcntl and dup2: the sockets at 3 and 4, as systemd
    // passes them.
    unsafe {
        cmd.pre_exec(move || {
            // Out of the way first (either may be 3 or 4 already), then into place; dup2
            // leaves the copies without close-on-exec.
            let (ha, hb) = (
                libc::fcntl(fa, libc::F_DUPFD, 100),
                libc::fcntl(fb, libc::F_DUPFD, 100),
            );
            if ha < 0 || hb < 0 || libc::dup2(ha, 3) < 0 || libc::dup2(hb, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let daemon = Daemon {
        child: cmd.spawn().unwrap(),
    };
    common::wait_for(&control);
    // The test's own copies go: only vbmq listens now.
    drop((la, lb));
    for (socket, size) in [(&a, 64u64 << 20), (&b, 16 << 20)] {
        let mut client = Client::connect(socket, 1, false).expect("connect");
        assert_eq!(client.capacity(), size);
        let data = pattern(size, 8192);
        assert_eq!(client.write(0, 4096, &data), 0);
        assert!(client.read(0, 4096, data.len()).1 == data);
    }
    // Not at run time: `vbmq ctl add-disk` passes the socket itself.
    let c = dir.path().join("run/c.sock");
    let out = ctl(
        &control,
        &[
            "add-disk",
            &format!("socket={},null=1G,socket-fd=3", c.display()),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("socket-fd"));
    assert!(daemon.terminate().success());
    // vbmq leaves an inherited socket's file to whoever made it.
    assert!(a.exists() && b.exists());
}

#[test]
fn a_descriptor_that_was_not_inherited_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (fd, why) in [
        ("9", "descriptor 9 was not inherited"),
        ("vm-a", "no socket named"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
            .arg("serve")
            .arg("--disk")
            .arg(format!(
                "socket={},null=1G,socket-fd={fd}",
                dir.path().join("a.sock").display()
            ))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
}
