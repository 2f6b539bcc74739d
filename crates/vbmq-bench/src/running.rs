//! A started system: its process, what the client connects to, and a watchdog that kills the
//! process if a run hangs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::error::{BenchError, Result};
use super::systems::{System, Target};

/// How long a backend may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a backend may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A started system; dropping it stops the process and removes its socket.
#[derive(Debug)]
pub struct Running {
    pub(super) child: Option<Child>,
    pub(super) target: Target,
    pub(super) socket: Option<PathBuf>,
    pub(super) log: Option<PathBuf>,
    /// The backend's control socket, if it has one.
    pub(super) control: Option<PathBuf>,
}

impl Running {
    /// What the client connects to.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The backend's control socket (`vbmq serve --control`), if it has one.
    pub fn control(&self) -> Option<&Path> {
        self.control.as_deref()
    }

    /// The backend process, if there is one.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(super) fn wait_ready(&mut self, system: System) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.socket.as_ref().is_some_and(|s| s.exists()) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(BenchError::Backend(format!(
                    "{} exited before it was ready ({status}): {}",
                    system.id(),
                    self.log_tail()
                )));
            }
            if Instant::now() >= deadline {
                return Err(BenchError::Backend(format!(
                    "{} did not create its socket within {READY_TIMEOUT:?}: {}",
                    system.id(),
                    self.log_tail()
                )));
            }
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// Arms a timer that SIGKILLs the backend after `budget`: a backend that hangs mid-handshake
    /// then fails the run (the client sees the socket close) instead of hanging the benchmark.
    /// Disarm it before `stop`, which reaps the process.
    pub fn watchdog(&self, budget: Duration) -> Watchdog {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let pid = self.pid().and_then(|p| libc::pid_t::try_from(p).ok());
        let thread = thread::spawn(move || match (cancelled.recv_timeout(budget), pid) {
            (Err(RecvTimeoutError::Timeout), Some(pid)) => {
                // SAFETY: kill has no memory-safety preconditions; the child is not reaped
                // while the watchdog is armed (see above), so the pid is still ours.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                true
            }
            _ => false,
        });
        Watchdog {
            cancel: Some(cancel),
            thread: Some(thread),
        }
    }

    /// The last lines the backend wrote to stderr, on one line.
    pub fn log_tail(&self) -> String {
        let Some(text) = self.log.as_ref().and_then(|l| fs::read_to_string(l).ok()) else {
            return "no output".into();
        };
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return "no output".into();
        }
        lines[lines.len().saturating_sub(3)..].join(" / ")
    }

    /// Asks the backend to exit (SIGTERM) and waits; kills it if it does not. Returns a warning
    /// if it did not exit cleanly.
    pub fn stop(&mut self) -> Option<String> {
        let mut child = self.child.take()?;
        let warning = terminate(&mut child);
        self.remove_files();
        warning
    }

    fn remove_files(&mut self) {
        if let Some(socket) = self.socket.take() {
            let _ = fs::remove_file(socket);
        }
        if let Some(log) = self.log.take() {
            let _ = fs::remove_file(log);
        }
        if let Some(control) = self.control.take() {
            let _ = fs::remove_file(control);
        }
    }
}

/// See [`Running::watchdog`].
pub struct Watchdog {
    cancel: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<bool>>,
}

impl Watchdog {
    /// Disarms it; true if it had already killed the backend.
    pub fn disarm(mut self) -> bool {
        self.stop()
    }

    fn stop(&mut self) -> bool {
        drop(self.cancel.take());
        self.thread
            .take()
            .is_some_and(|t| t.join().unwrap_or(false))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_files();
    }
}

fn terminate(child: &mut Child) -> Option<String> {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Some("pid out of range".into());
    };
    // SAFETY: kill has no memory-safety preconditions; `pid` is our own unreaped child, so the
    // number cannot have been reused by another process.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return None,
            Ok(Some(status)) => return Some(format!("exited with {status} after SIGTERM")),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Some(format!("did not exit within {STOP_TIMEOUT:?} of SIGTERM"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn watchdog_kills_a_hung_backend_and_not_a_finished_one() {
        let spawn = || Running {
            child: Some(Command::new("sleep").arg("30").spawn().unwrap()),
            target: Target::VhostUser("/nonexistent".into()),
            socket: None,
            log: None,
            control: None,
        };
        let mut hung = spawn();
        let dog = hung.watchdog(Duration::from_millis(20));
        thread::sleep(Duration::from_millis(100));
        assert!(dog.disarm());
        let status = hung.child.as_mut().unwrap().wait().unwrap();
        assert!(!status.success());

        let mut fine = spawn();
        assert!(!fine.watchdog(Duration::from_secs(30)).disarm());
        assert!(fine.child.as_mut().unwrap().try_wait().unwrap().is_none());
    }
}
