//! Real NBD servers for tests: `qemu-nbd` and `qemu-storage-daemon` exporting a raw image on
//! a Unix socket. Each forks once its socket listens (so a test waits for nothing else) and is
//! killed by its own PID when dropped.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A server started by a test, killed on drop.
pub struct NbdServer {
    pub pid: i32,
    pub socket: PathBuf,
}

use crate::common::s;
use crate::common::tool::run_tool;

/// Runs a server that daemonises once ready and writes its PID to `pid_file`.
fn run(program: &str, args: &[String], pid_file: &Path, socket: &Path) -> NbdServer {
    let _ = std::fs::remove_file(pid_file);
    run_tool(program, args);
    let pid = std::fs::read_to_string(pid_file).expect("the server's PID file");
    NbdServer {
        pid: pid.trim().parse().expect("a PID"),
        socket: socket.to_owned(),
    }
}

impl NbdServer {
    /// `qemu-nbd` exporting `image` (raw) as `name` on `socket`, several clients at once.
    pub fn qemu_nbd(image: &Path, socket: &Path, name: &str, read_only: bool) -> Self {
        let pid_file = socket.with_extension("pid");
        let mut args = vec![
            "--persistent".to_owned(),
            "--shared=8".to_owned(),
            "--format=raw".to_owned(),
            "--cache=none".to_owned(),
            format!("--export-name={name}"),
            format!("--socket={}", s(socket)),
            format!("--pid-file={}", s(&pid_file)),
            "--fork".to_owned(),
        ];
        if read_only {
            args.push("--read-only".to_owned());
        }
        args.push(s(image).to_owned());
        run("qemu-nbd", &args, &pid_file, socket)
    }

    /// `qemu-storage-daemon` exporting `image` writable as `name` on `socket`.
    pub fn storage_daemon(image: &Path, socket: &Path, name: &str) -> Self {
        let pid_file = socket.with_extension("pid");
        let args = vec![
            "--blockdev".to_owned(),
            format!(
                "driver=file,filename={},node-name=disk,cache.direct=on",
                s(image)
            ),
            "--nbd-server".to_owned(),
            format!("addr.type=unix,addr.path={}", s(socket)),
            "--export".to_owned(),
            format!("type=nbd,id=export,node-name=disk,name={name},writable=on"),
            "--pidfile".to_owned(),
            s(&pid_file).to_owned(),
            "--daemonize".to_owned(),
        ];
        run("qemu-storage-daemon", &args, &pid_file, socket)
    }

    /// Kills the server and returns once it is gone.
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        // SAFETY: a signal to the server this test started, by its PID.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while alive(self.pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The process runs (a zombie that its new parent has not reaped yet is gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
