//! `SET_DEVICE_STATE_FD` and `CHECK_DEVICE_STATE`: the state moves through a pipe the frontend
//! reads (save) or writes (load) while it goes on talking to the backend, so the transfer runs on
//! a thread of its own; the check waits for that thread and reports its outcome.

use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::format::{MAX_STATE, ShareState};
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
    /// device is stopped) and writes it, a load reads it all, then applies it. A transfer
    /// started before and not checked is waited for first.
    pub fn start(&self, device: Arc<FsDevice>, direction: Direction, file: File) -> io::Result<()> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(earlier) = running.take() {
            let _ = earlier.join();
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

fn write_state(mut file: File, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    // Closing the pipe is the end of the state for the frontend.
    drop(file);
    Ok(())
}

/// Reads a state of at most [`MAX_STATE`] bytes until the frontend closes the pipe.
fn read_state(file: File) -> io::Result<ShareState> {
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_STATE).unwrap_or(u64::MAX) + 1;
    file.take(limit).read_to_end(&mut bytes)?;
    ShareState::decode(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}
