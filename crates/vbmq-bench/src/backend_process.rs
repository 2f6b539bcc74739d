//! A backend the studies start themselves (vbmq, qemu-storage-daemon, virtiofsd), pinned to the
//! backend CPUs in its own session, ready once its socket exists, stopped with SIGTERM on drop.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cpus::pin_to;
use super::error::{BenchError, Result};

/// A running backend process.
pub struct BackendProcess {
    child: Child,
    socket: PathBuf,
}

impl BackendProcess {
    /// Starts `cmd` on `cpus` and waits up to 20 s for `socket` to appear.
    pub fn start(mut cmd: Command, socket: &Path, cpus: &[usize]) -> Result<Self> {
        let _ = std::fs::remove_file(socket);
        let cpus = cpus.to_vec();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: setsid and sched_setaffinity are async-signal-safe (see `launcher`).
        unsafe {
            cmd.pre_exec(move || {
                libc::setsid();
                pin_to(&cpus)
            });
        }
        let program = cmd.get_program().to_string_lossy().into_owned();
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::io(format!("starting {program}"), e))?;
        let backend = BackendProcess {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !backend.socket.exists() {
            if Instant::now() > deadline {
                return Err(BenchError::Backend(format!("{program} did not listen")));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(backend)
    }

    /// Its process id (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for BackendProcess {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe { libc::kill(self.child.id().cast_signed(), libc::SIGTERM) };
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}
