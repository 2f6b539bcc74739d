//! The test's side of vbmq: its directories, the `vbmq serve` process, a raw control client.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::stall::{self, Staller};

/// A test's directories: `run` (0755, the sockets'), `share`, and vbmq's log beside them.
pub struct Dirs {
    _tmp: tempfile::TempDir,
    pub top: PathBuf,
    pub run: PathBuf,
}

impl Dirs {
    pub fn new() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().to_path_buf();
        let run = top.join("run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::create_dir_all(top.join("share")).unwrap();
        // Local users may pass through to the sockets' directory and list it, as /run/vbmq.
        std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        Dirs {
            _tmp: tmp,
            top,
            run,
        }
    }

    pub fn run(&self, name: &str) -> PathBuf {
        self.run.join(name)
    }

    pub fn share_spec(&self, extra: &str) -> String {
        format!(
            "socket={},dir={},tag=t{extra}",
            s(&self.run("fs.sock")),
            s(&self.top.join("share"))
        )
    }
}

pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `vbmq serve ARGS` started with `umask`, killed on drop.
pub struct Vbmq {
    child: Child,
    log: PathBuf,
    /// Dropped after the child is killed (it would wait for ever in a held call without it).
    staller: Option<Staller>,
}

impl Vbmq {
    pub fn start(dirs: &Dirs, umask: libc::mode_t, args: &[String]) -> Vbmq {
        Self::start_stalled(dirs, umask, args, None)
    }

    /// As [`Self::start`], each chmod, chown and rename held for `stall`.
    pub fn start_stalled(
        dirs: &Dirs,
        umask: libc::mode_t,
        args: &[String],
        stall: Option<Duration>,
    ) -> Vbmq {
        let log = dirs.top.join("vbmq.log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        command
            .arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        // SAFETY: umask(2) is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                libc::umask(umask);
                Ok(())
            });
        }
        if stall.is_some() {
            stall::install(&mut command);
        }
        let child = command.spawn().expect("spawn vbmq");
        let staller = stall.map(|delay| Staller::start(child.id(), delay));
        Vbmq {
            child,
            log,
            staller,
        }
    }

    /// Waits for each of `sockets`.
    pub fn serving(mut self, sockets: &[PathBuf]) -> Vbmq {
        let deadline = Instant::now() + Duration::from_secs(20);
        for socket in sockets {
            while !socket.exists() {
                assert!(self.alive(), "vbmq exited: {}", self.log());
                assert!(
                    Instant::now() < deadline,
                    "no {}: {}",
                    s(socket),
                    self.log()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self
    }

    /// Waits for vbmq to exit on its own.
    pub fn exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "vbmq did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many calls were held.
    pub fn stalled(&self) -> u64 {
        self.staller.as_ref().map_or(0, Staller::held)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Vbmq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw client of the control socket.
pub struct Control(BufReader<UnixStream>);

impl Control {
    pub fn connect(path: &Path) -> Control {
        Control(BufReader::new(UnixStream::connect(path).unwrap()))
    }

    pub fn request(&mut self, request: Value) -> Value {
        let mut line = request.to_string();
        line.push('\n');
        self.0.get_mut().write_all(line.as_bytes()).unwrap();
        let mut reply = String::new();
        self.0.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?}: {e}"))
    }

    pub fn add_disk(&mut self, spec: &str) -> Value {
        self.request(serde_json::json!({"command": "add-disk", "spec": spec}))
    }

    pub fn remove_disk(&mut self, socket: &Path) -> Value {
        self.request(serde_json::json!({"command": "remove-disk", "socket": s(socket)}))
    }
}

pub fn lock_of(socket: &Path) -> PathBuf {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Permission bits, owning group, and whether the file is a socket.
pub fn mode_and_group(path: &Path) -> (u32, u32, bool) {
    let metadata = std::fs::symlink_metadata(path).unwrap();
    (
        metadata.mode() & 0o7777,
        metadata.gid(),
        metadata.file_type().is_socket(),
    )
}
