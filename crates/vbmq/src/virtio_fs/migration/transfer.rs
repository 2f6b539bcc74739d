//! `SET_DEVICE_STATE_FD` and `CHECK_DEVICE_STATE`: the state moves through a pipe the frontend
//! reads (save) or writes (load) while it goes on talking to the backend, so the transfer runs on
//! a thread of its own; the check waits for that thread and reports its outcome.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::format::{MAX_STATE, ShareState, StateError};
use crate::virtio_fs::FsDevice;

/// Which way the state goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From this backend to the frontend (the source).
    Save,
    /// From the frontend to this backend (the destination).
    Load,
}

/// The state transfer of one connection, if one was started.
#[derive(Default)]
pub struct StateTransfer {
    running: Mutex<Option<JoinHandle<io::Result<()>>>>,
}

impl StateTransfer {
    /// Starts moving `device`'s state through `file`, on a thread: a save takes the state (the
    /// device is stopped) and writes it, a load reads it all, then applies it. Refused while an
    /// earlier transfer still runs (one not checked but ended is forgotten).
    pub fn start(&self, device: Arc<FsDevice>, direction: Direction, file: File) -> io::Result<()> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if running
            .as_ref()
            .is_some_and(|earlier| !earlier.is_finished())
        {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "a state transfer is under way",
            ));
        }
        let thread = std::thread::Builder::new().name("vbmq-fs-state".into());
        let handle = match direction {
            Direction::Save => thread.spawn(move || {
                let state = device.save_state()?;
                let bytes = state.encode().map_err(io::Error::other)?;
                write_state(file, &bytes)
            })?,
            Direction::Load => thread.spawn(move || {
                let state = read_state(file)?;
                device.load_state(&state)
            })?,
        };
        *running = Some(handle);
        Ok(())
    }

    /// Waits for the transfer and gives its outcome; an error if none was started.
    pub fn check(&self) -> io::Result<()> {
        let handle = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match handle {
            None => Err(io::Error::other("no state transfer was started")),
            Some(handle) => handle
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the state transfer panicked"))),
        }
    }
}

/// A transfer gives up when the frontend moves no byte of the pipe for this long, or when it
/// lasts longer than [`TOTAL_LIMIT`]: a frontend that keeps the pipe open and silent would
/// otherwise hold the connection's `CHECK_DEVICE_STATE`, and with it the share's socket.
const IDLE_LIMIT: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 30 });
const TOTAL_LIMIT: Duration = Duration::from_secs(600);

fn write_state(mut file: File, bytes: &[u8]) -> io::Result<()> {
    set_nonblocking(&file)?;
    let start = Instant::now();
    let mut left = bytes;
    while !left.is_empty() {
        wait_ready(&file, libc::POLLOUT, start)?;
        match file.write(left) {
            Ok(n) => left = left.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // Closing the pipe is the end of the state for the frontend.
    drop(file);
    Ok(())
}

/// Reads a state of at most [`MAX_STATE`] bytes until the frontend closes the pipe.
fn read_state(mut file: File) -> io::Result<ShareState> {
    set_nonblocking(&file)?;
    let start = Instant::now();
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        wait_ready(&file, libc::POLLIN, start)?;
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                // One byte past the limit is enough to refuse it.
                if bytes.len() + n > MAX_STATE {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        StateError::Oversized,
                    ));
                }
                bytes.extend_from_slice(chunk.get(..n).unwrap_or_default());
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    ShareState::decode(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn set_nonblocking(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor `file` owns, with an integer argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Waits until `file` is ready for `events` (or closed at the other end), within the limits.
fn wait_ready(file: &File, events: libc::c_short, start: Instant) -> io::Result<()> {
    loop {
        let left = TOTAL_LIMIT.saturating_sub(start.elapsed());
        let wait = left.min(IDLE_LIMIT);
        if wait.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the state transfer took too long",
            ));
        }
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one pollfd, alive for the call.
        let ready = unsafe { libc::poll(&raw mut poll, 1, ms) };
        match ready {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the frontend moved no state for {} s", IDLE_LIMIT.as_secs()),
                ));
            }
            n if n > 0 => return Ok(()),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "transfer_tests.rs"]
mod tests;
