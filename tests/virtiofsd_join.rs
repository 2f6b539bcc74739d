//! `vbmq virtiofsd --join CTL`: the share virtiofsd's command line describes is added to a
//! running, confined `vbmq serve --control CTL --fs-root ROOT`, served there, and removed when
//! the launcher gets SIGTERM; the launcher ends with one line when the share disappears or the
//! add is refused. Real processes, driven through the share's socket by the virtio-fs client.

mod common;
#[path = "common/inherit_fd.rs"]
mod inherit_fd;

use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::ctl::ok;
use common::{Daemon, ctl};
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, Opcode, ROOT_ID, WriteIn};

const READY: &str = "Waiting for vhost-user socket connection...";

/// `vbmq serve --control DIR/run/ctl.sock --fs-root DIR/roots`, confined as by default, with
/// DIR/roots/share holding `file`.
fn serve(dir: &Path) -> (Daemon, PathBuf) {
    let share = dir.join("roots/share");
    std::fs::create_dir_all(&share).unwrap();
    std::fs::write(share.join("file"), b"host bytes").unwrap();
    common::serve::serve_with_fs_root(dir)
}

/// The sockets of the shares `vbmq ctl list` shows.
fn listed_shares(control: &Path) -> Vec<String> {
    common::ctl::list(control)
        .iter()
        .filter(|d| d["kind"] == "fs")
        .map(|d| d["socket"].as_str().unwrap().to_string())
        .collect()
}

/// A running `vbmq virtiofsd --join`, killed on drop.
struct Launcher {
    child: Child,
    stderr: PathBuf,
}

impl Launcher {
    fn spawn(dir: &Path, name: &str, mut command: Command) -> Self {
        let stderr = dir.join(format!("{name}.stderr"));
        let child = command
            .env_remove("RUST_LOG")
            .arg("--log-level=off")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Launcher { child, stderr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the readiness line.
    fn ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.log().lines().any(|line| line == READY) {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "exited: {}",
                self.log()
            );
            assert!(
                Instant::now() < deadline,
                "no readiness line: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit status.
    fn exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running: {}", self.log());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn terminate(&mut self) -> ExitStatus {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.exit()
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn join_command(control: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    command
        .arg("virtiofsd")
        .arg(format!("--join={}", control.display()));
    command
}

/// `vbmq virtiofsd --join` serving `shared` on `socket`, with virtiofsd's own options.
fn join_share(control: &Path, socket: &Path, shared: &Path) -> Command {
    let mut command = join_command(control);
    command
        .arg("--socket-path")
        .arg(socket)
        .arg("--shared-dir")
        .arg(shared);
    command
}

/// Reads `file` through the share on `socket` and writes "guest" over its start.
fn read_and_write(socket: &Path) {
    let mut client = FsClient::connect(socket).expect("connect to the joined share");
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(entry.attr.size, 10);
    let fh = client.open(entry.nodeid, libc::O_RDWR as u32).unwrap();
    let args = WriteIn {
        fh,
        size: 5,
        ..WriteIn::default()
    };
    let body = [fuse::args(&args), b"guest"].concat();
    let (out, _) = client
        .call(Opcode::Write, entry.nodeid, &body, &[], 4096)
        .unwrap();
    assert_eq!(out.error, 0);
    client.release(entry.nodeid, fh).unwrap();
}

/// `--join CTL --socket-path S`: the launcher binds S, the running vbmq serves it; SIGTERM
/// removes the share and ends the launcher with 0.
#[test]
fn a_joined_share_is_served_by_the_running_vbmq_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path());
    let socket = dir.path().join("sockets/vm1-fs.sock");
    let mut command = join_share(&control, &socket, &dir.path().join("roots/share"));
    command.args(["--cache", "never", "--sandbox", "none"]);
    let mut launcher = Launcher::spawn(dir.path(), "join", command);
    launcher.ready();
    read_and_write(&socket);
    assert_eq!(
        std::fs::read(dir.path().join("roots/share/file")).unwrap(),
        b"guestbytes"
    );
    assert_eq!(listed_shares(&control), [socket.display().to_string()]);
    let status = launcher.terminate();
    assert_eq!(status.code(), Some(0), "{}", launcher.log());
    assert!(listed_shares(&control).is_empty());
    assert!(!socket.exists(), "the socket the launcher bound is removed");
    assert!(daemon.alive());
}

/// `--join CTL --fd=N` (libvirt's): the inherited listening socket is passed as it is; the
/// running vbmq serves it, and its file stays the binder's.
#[test]
fn an_inherited_socket_joins_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve(dir.path());
    let socket = dir.path().join("libvirt.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fd = listener.as_raw_fd();
    let mut command = join_command(&control);
    inherit_fd::inherit_fd(&mut command, fd);
    command.arg(format!("--fd={fd}")).arg("-o").arg(format!(
        "source={},cache=always,xattr",
        dir.path().join("roots/share").display()
    ));
    let mut launcher = Launcher::spawn(dir.path(), "fd", command);
    drop(listener);
    launcher.ready();
    read_and_write(&socket);
    assert_eq!(listed_shares(&control), [socket.display().to_string()]);
    assert_eq!(launcher.terminate().code(), Some(0), "{}", launcher.log());
    assert!(listed_shares(&control).is_empty());
    assert!(socket.exists(), "libvirt's socket is libvirt's to remove");
    assert!(daemon.alive());
}

/// A directory outside every `--fs-root`: the daemon's reason, one line, exit 1, and the
/// socket the launcher bound is gone.
#[test]
fn a_refused_join_exits_1_with_the_daemons_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, control) = serve(dir.path());
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let socket = dir.path().join("refused.sock");
    let command = join_share(&control, &socket, &outside);
    let mut launcher = Launcher::spawn(dir.path(), "refused", command);
    assert_eq!(launcher.exit().code(), Some(1));
    let log = launcher.log();
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.contains("is not beneath an --fs-root"), "{log}");
    assert!(!socket.exists());
    assert!(listed_shares(&control).is_empty());
}

/// The share removed behind the launcher's back (`vbmq ctl remove-fs`): it notices and exits 1
/// with one line; options `--fs` cannot say are refused before anything is asked.
#[test]
fn a_share_removed_elsewhere_ends_the_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, control) = serve(dir.path());
    let socket = dir.path().join("gone.sock");
    let shared = dir.path().join("roots/share");
    let command = join_share(&control, &socket, &shared);
    let mut launcher = Launcher::spawn(dir.path(), "gone", command);
    launcher.ready();
    let out = ctl(&control, &["remove-fs", socket.to_str().unwrap()]);
    ok(&out);
    assert_eq!(launcher.exit().code(), Some(1));
    let log = launcher.log();
    assert!(log.contains("no longer served by the vbmq at"), "{log}");
    assert_eq!(log.lines().filter(|l| *l != READY).count(), 1, "{log}");

    let mut command = join_share(&control, &socket, &shared);
    command.arg("--uid-map=:0:0:65536:");
    let mut refused = Launcher::spawn(dir.path(), "map", command);
    assert_eq!(refused.exit().code(), Some(1));
    assert!(
        refused.log().contains("not with --join"),
        "{}",
        refused.log()
    );
    assert!(listed_shares(&control).is_empty());
}
