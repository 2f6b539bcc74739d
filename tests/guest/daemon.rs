//! A `vbmq serve` process for the guests to attach to, with its log captured.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// A running backend daemon; killed on drop if the test did not [`Vbmq::stop`] it.
pub struct Vbmq {
    child: Child,
    log: PathBuf,
}

impl Vbmq {
    /// Starts `vbmq serve` with one `--disk` per entry of `disks` (the option's value, e.g.
    /// `socket=/tmp/x.sock,path=/tmp/x.img,queues=4`) and waits for every socket to exist.
    /// Logs at warn level go to `log_path`.
    pub fn serve(disks: &[String], log_path: PathBuf) -> Self {
        Self::serve_with(disks, &[], log_path)
    }

    /// As [`Self::serve`], with one `--fs` per entry of `shares`.
    pub fn serve_with(disks: &[String], shares: &[String], log_path: PathBuf) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        cmd.arg("serve");
        Self::serve_specs(cmd, disks, shares, vec![], log_path)
    }

    /// As [`Self::serve`], with the control socket `control` too.
    pub fn serve_controlled(control: &Path, disks: &[String], log_path: PathBuf) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        cmd.arg("serve").arg("--control").arg(control);
        Self::serve_specs(cmd, disks, &[], vec![control.to_path_buf()], log_path)
    }

    /// Runs `cmd` with one `--disk` per disk and one `--fs` per share, and waits for `sockets`
    /// and every socket they name.
    fn serve_specs(
        mut cmd: Command,
        disks: &[String],
        shares: &[String],
        mut sockets: Vec<PathBuf>,
        log_path: PathBuf,
    ) -> Self {
        for disk in disks {
            cmd.args(["--disk", disk]);
        }
        for share in shares {
            cmd.args(["--fs", share]);
        }
        sockets.extend(disks.iter().chain(shares).map(|d| {
            d.split(',')
                .find_map(|kv| kv.strip_prefix("socket="))
                .map(PathBuf::from)
                .expect("every --disk and --fs names its socket")
        }));
        Self::spawn(cmd, sockets, log_path)
    }

    pub fn spawn(mut cmd: Command, sockets: Vec<PathBuf>, log: PathBuf) -> Self {
        let log_file = std::fs::File::create(&log).unwrap();
        if !cmd.get_envs().any(|(key, _)| key == "RUST_LOG") {
            cmd.env("RUST_LOG", "warn");
        }
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let mut daemon = Vbmq { child, log };
        let start = Instant::now();
        while !sockets.iter().all(|s| s.exists()) {
            if let Some(status) = daemon.child.try_wait().unwrap() {
                panic!("{cmd:?} exited with {status}:\n{}", daemon.log_text());
            }
            assert!(
                start.elapsed() < READY_TIMEOUT,
                "{cmd:?}: sockets {sockets:?} not ready after {READY_TIMEOUT:?}:\n{}",
                daemon.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    /// Kills the daemon with SIGKILL, as a crash would, and waits for it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and returns how the daemon exited (None: not in time).
    pub fn terminate(mut self) -> Option<ExitStatus> {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid, not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        self.wait(STOP_TIMEOUT)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and asserts the daemon exits 0 in time having logged no warning or error
    /// (see [`is_complaint`]).
    pub fn stop(mut self) {
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid has no memory-safety effect; the child is not
        // reaped yet (we still own it), so the pid cannot have been reused.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let status = self.wait(STOP_TIMEOUT);
        let log = self.log_text();
        let Some(status) = status else {
            panic!("daemon ignored SIGTERM for {STOP_TIMEOUT:?}; log:\n{log}");
        };
        assert!(status.success(), "daemon exited with {status}; log:\n{log}");
        let noisy: Vec<&str> = log.lines().filter(|l| is_complaint(l)).collect();
        assert!(noisy.is_empty(), "daemon logged warnings or errors:\n{log}");
    }

    fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An error or a warning: a healthy guest's I/O must produce neither.
fn is_complaint(line: &str) -> bool {
    line.contains("ERROR") || line.contains("WARN")
}

impl Drop for Vbmq {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- vbmq log ---\n{}", self.log_text());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
