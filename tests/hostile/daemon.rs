//! A `vbmq serve` process with three disks: the one under attack, a read-only one, and a victim
//! that a well-behaved driver uses throughout.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const TARGET_SIZE: usize = 1 << 20;
pub const READONLY_SIZE: usize = 64 << 10;
pub const VICTIM_SIZE: usize = 1 << 20;
pub const QUEUE_SIZE: u16 = 256;
pub const TARGET_QUEUES: u16 = 2;

pub struct Daemon {
    child: Child,
    pub dir: PathBuf,
}

/// Initial contents: every sector distinct, so a misplaced read or write shows.
pub fn pattern(size: usize, seed: u8) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u8).wrapping_mul(7) ^ (i >> 9) as u8 ^ seed)
        .collect()
}

impl Daemon {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, "")
    }

    /// `target_opts` are appended to the attacked disk's `--disk` (e.g. ",mode=adaptive").
    pub fn start_with(name: &str, target_opts: &str) -> Self {
        let level = std::env::var("HOSTILE_LOG").unwrap_or_else(|_| "warn".into());
        Self::start_logging(name, target_opts, &level)
    }

    /// As [`Self::start_with`], logging at `level` (`RUST_LOG`).
    pub fn start_logging(name: &str, target_opts: &str, level: &str) -> Self {
        Self::start_env(name, target_opts, level, &[])
    }

    /// As [`Self::start_logging`], with `env` added to vbmq's environment.
    pub fn start_env(name: &str, target_opts: &str, level: &str, env: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("target.img"), pattern(TARGET_SIZE, 1)).unwrap();
        std::fs::write(dir.join("readonly.img"), pattern(READONLY_SIZE, 2)).unwrap();
        std::fs::write(dir.join("victim.img"), pattern(VICTIM_SIZE, 3)).unwrap();
        // HOSTILE_DISK_OPTS=",mode=poll" adds options to every disk (e.g. to strace each mode).
        let more = std::env::var("HOSTILE_DISK_OPTS").unwrap_or_default();
        let disk = |sock: &str, img: &str, extra: &str| {
            format!(
                "socket={},path={},queue-size={QUEUE_SIZE}{extra}{more}",
                dir.join(sock).display(),
                dir.join(img).display()
            )
        };
        // Appending, so the battery can truncate a flooded log under the running daemon.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("vbmq.log"))
            .unwrap();
        // HOSTILE_STRACE=FILE runs vbmq under `strace -f` (to list the system calls it makes).
        let mut command = match std::env::var_os("HOSTILE_STRACE") {
            Some(out) => {
                let mut c = Command::new("strace");
                c.args(["-f", "-qq", "-o"])
                    .arg(out)
                    .arg(env!("CARGO_BIN_EXE_vbmq"));
                c
            }
            None => Command::new(env!("CARGO_BIN_EXE_vbmq")),
        };
        let child = command
            .arg("serve")
            // HOSTILE_SECCOMP=off lets strace see calls the filter would otherwise stop.
            .arg(format!(
                "--seccomp={}",
                std::env::var("HOSTILE_SECCOMP").unwrap_or("on".into())
            ))
            .args([
                "--disk",
                &disk(
                    "target.sock",
                    "target.img",
                    &format!(",queues={TARGET_QUEUES}{target_opts}"),
                ),
            ])
            .args([
                "--disk",
                &disk("readonly.sock", "readonly.img", ",queues=1,readonly=on"),
            ])
            .args(["--disk", &disk("victim.sock", "victim.img", ",queues=1")])
            .env("RUST_LOG", level)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let daemon = Daemon { child, dir };
        for sock in ["target.sock", "readonly.sock", "victim.sock"] {
            daemon.wait_for(&daemon.dir.join(sock));
        }
        daemon
    }

    fn wait_for(&self, path: &Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !path.exists() {
            assert!(
                Instant::now() < deadline,
                "vbmq did not create {}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `None` while running; the exit status once it died.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Open descriptors of the daemon, to catch leaks across many connections.
    pub fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// What the daemon's descriptors point to, counted ("anon_inode:[eventfd]: 12, ...").
    pub fn fd_kinds(&self) -> String {
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        for entry in std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .into_iter()
            .flatten()
            .flatten()
        {
            let target = std::fs::read_link(entry.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let kind = target
                .split(['[', ':'])
                .next()
                .unwrap_or_default()
                .to_string();
            let kind = if target.starts_with("anon_inode") {
                target
            } else {
                kind
            };
            *kinds.entry(kind).or_default() += 1;
        }
        format!("{kinds:?}")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vbmq.log")).unwrap_or_default()
    }

    /// SIGTERM, then the exit status (vbmq must exit 0).
    pub fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id().cast_signed(), libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var_os("HOSTILE_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
