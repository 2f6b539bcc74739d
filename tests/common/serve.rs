//! One start-up harness for `vbmq serve`: disks, shares, a control socket, a state file, a log,
//! any other option; started once every socket it names exists.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Daemon;

/// How long a starting vbmq may take to bind its sockets on a loaded machine.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// A `vbmq serve` command line being built; [`Serve::start`] runs it.
pub struct Serve {
    cmd: Command,
    sockets: Vec<PathBuf>,
    log: Option<PathBuf>,
}

impl Default for Serve {
    fn default() -> Self {
        Self::new()
    }
}

impl Serve {
    /// `vbmq serve`, confined as by default.
    pub fn new() -> Serve {
        Self::by(Command::new(env!("CARGO_BIN_EXE_vbmq")))
    }

    /// `vbmq serve` run by `cmd` (`prlimit ... vbmq`, or with a `pre_exec` hook).
    pub fn by(mut cmd: Command) -> Serve {
        cmd.arg("serve").stdin(Stdio::null());
        Serve {
            cmd,
            sockets: Vec::new(),
            log: None,
        }
    }

    /// `--disk SPEC`; the start waits for its `socket=`.
    pub fn disk(mut self, spec: &str) -> Serve {
        self.sockets.push(socket_of(spec));
        self.cmd.arg("--disk").arg(spec);
        self
    }

    /// One `--disk` per spec.
    pub fn disks(self, specs: &[String]) -> Serve {
        specs.iter().fold(self, |serve, spec| serve.disk(spec))
    }

    /// `--fs SPEC`; the start waits for its `socket=`.
    pub fn fs(mut self, spec: &str) -> Serve {
        self.sockets.push(socket_of(spec));
        self.cmd.arg("--fs").arg(spec);
        self
    }

    /// `vbmq serve --config FILE`, whose start waits for `sockets` (those the file names).
    pub fn config(file: &Path, sockets: &[&Path]) -> Serve {
        let mut serve = Serve::new().opt("--config", file);
        serve
            .sockets
            .extend(sockets.iter().map(|s| s.to_path_buf()));
        serve
    }

    /// `--control PATH`; the start waits for the socket.
    pub fn control(mut self, path: &Path) -> Serve {
        self.sockets.push(path.to_path_buf());
        self.cmd.arg("--control").arg(path);
        self
    }

    /// Any other option and its value (`--state`, `--fs-root`, `--metrics`, `--config`).
    pub fn opt(mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> Serve {
        self.cmd.arg(name).arg(value);
        self
    }

    /// The start also waits for `path` (a socket a configuration file names).
    pub fn wait(mut self, path: &Path) -> Serve {
        self.sockets.push(path.to_path_buf());
        self
    }

    /// Its stderr a pipe for the test to read (`daemon.child.stderr`).
    pub fn piped_stderr(mut self) -> Serve {
        self.cmd.stderr(Stdio::piped());
        self
    }

    /// An environment variable (`RUST_LOG`).
    pub fn env(mut self, key: &str, value: &str) -> Serve {
        self.cmd.env(key, value);
        self
    }

    /// Its log (stderr) into `path`, stdout to nowhere.
    pub fn log(mut self, path: &Path) -> Serve {
        self.log = Some(path.to_path_buf());
        self
    }

    /// Starts vbmq and waits for every socket; fails with the log if it exits first.
    pub fn start(mut self) -> Daemon {
        if let Some(log) = &self.log {
            let file = std::fs::File::create(log).expect("create the log");
            self.cmd.stdout(Stdio::null()).stderr(file);
        }
        let mut daemon = Daemon {
            child: self.cmd.spawn().expect("spawn vbmq"),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        while let Some(missing) = self.sockets.iter().find(|s| !s.exists()) {
            let log = || {
                self.log
                    .as_ref()
                    .and_then(|l| std::fs::read_to_string(l).ok())
                    .unwrap_or_default()
            };
            assert!(daemon.alive(), "vbmq exited: {}", log());
            assert!(
                Instant::now() < deadline,
                "{} never appeared: {}",
                missing.display(),
                log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }
}

/// The `socket=` of a `--disk` or `--fs` spec.
fn socket_of(spec: &str) -> PathBuf {
    spec.split(',')
        .find_map(|kv| kv.strip_prefix("socket="))
        .map(PathBuf::from)
        .expect("socket key")
}

/// `vbmq serve ARGS` refused at start: its stderr.
pub fn refused_at_start(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("serve")
        .args(args)
        .output()
        .expect("run vbmq");
    assert!(!out.status.success(), "{args:?} was served");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `vbmq serve --control DIR/run/ctl.sock --fs-root DIR/roots`, confined as by default.
pub fn serve_with_fs_root(dir: &Path) -> (Daemon, PathBuf) {
    let control = dir.join("run/ctl.sock");
    let roots = dir.join("roots");
    std::fs::create_dir_all(&roots).unwrap();
    let daemon = Serve::new()
        .control(&control)
        .opt("--fs-root", &roots)
        .start();
    (daemon, control)
}

/// `vbmq serve --control CONTROL --state STATE`, once the control socket is there.
pub fn serve_with_state(control: &Path, state: &Path) -> Daemon {
    Serve::new().control(control).opt("--state", state).start()
}

/// `vbmq serve --fs socket=DIR/fs.sock,dir=SHARE,tag=t,mode=event EXTRA` run by `command`, its
/// log in DIR/vbmq.log; returns once the socket is there.
pub fn serve_share(command: Command, dir: &Path, share: &Path, extra: &str) -> Daemon {
    let spec = format!(
        "socket={},dir={},tag=t,mode=event{extra}",
        dir.join("fs.sock").display(),
        share.display()
    );
    Serve::by(command)
        .fs(&spec)
        .env("RUST_LOG", "warn")
        .log(&dir.join("vbmq.log"))
        .start()
}

/// `vbmq serve ARGS` refused at start: exit status 2 before it serves (a hang fails after 10 s);
/// its stderr.
pub fn exits_2_at_start<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("serve")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vbmq");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = child.try_wait().unwrap().is_none();
    if served {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!served, "{args:?}: vbmq served: {stderr}");
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    stderr
}

/// Serves `image` as the one disk of a vbmq with a control socket (`DIR/run/ctl.sock`), on
/// `DIR/NAME.sock`: the daemon, the control socket and the disk's socket.
pub fn serve_one(dir: &Path, name: &str, image: &Path) -> (Daemon, PathBuf, PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    let spec = super::disk_spec::plain(&socket, image);
    let (daemon, control) = super::serve_with_control(dir, &[spec]);
    (daemon, control, socket)
}
