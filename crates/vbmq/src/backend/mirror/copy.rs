//! The background copy: a few threads, each with an engine of the disk below the mirror and a
//! request of [`CHUNK`] bytes in flight to the destination, take chunks in order; a chunk a
//! guest write overlapped is taken again later (see `run`). A chunk of zeros goes as
//! `NBD_CMD_WRITE_ZEROES`, so a sparse image stays sparse and costs no bandwidth. A resumed
//! mirror skips the chunks the destination kept from before the cut (see `run`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::destination::Remote;
use super::run::{CHUNK, Run};
use crate::backend::Disk;
use crate::backend::engine_io::EngineIo;
use crate::host_size;

/// Copying threads, each with one chunk in flight.
pub const COPIERS: usize = 4;

/// Chunks to take: the next one in order, then those to take again.
struct Chunks {
    next: AtomicUsize,
    again: Mutex<VecDeque<usize>>,
}

impl Chunks {
    fn take(&self, count: usize) -> Option<usize> {
        let next = self.next.fetch_add(1, Ordering::SeqCst);
        if next < count {
            return Some(next);
        }
        self.again
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    fn again(&self, chunk: usize) {
        self.again
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(chunk);
    }
}

/// Starts the copy of `disk` (the disk below the mirror) into `run`'s destination.
pub fn start(disk: Arc<dyn Disk>, run: Arc<Run>) -> Vec<JoinHandle<()>> {
    let chunks = Arc::new(Chunks {
        next: AtomicUsize::new(0),
        again: Mutex::new(VecDeque::new()),
    });
    let mut threads = Vec::with_capacity(COPIERS);
    for i in 0..COPIERS {
        let (disk, copying, chunks) = (disk.clone(), run.clone(), chunks.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("vbmq-mirror{i}"))
            .spawn(move || copier(disk.as_ref(), &copying, &chunks));
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => run.fail(format!("no thread for the copy: {e}")),
        }
    }
    threads
}

fn copier(disk: &dyn Disk, run: &Run, chunks: &Chunks) {
    let mut io = match EngineIo::new(disk) {
        Ok(io) => io,
        Err(e) => return run.fail(format!("the copy cannot read the disk: {e}")),
    };
    let mut buf = vec![0u8; host_size(CHUNK)];
    // Once every chunk is handed out, only those to take again remain: they wait for a pause
    // in the guest's writes to them.
    while !run.is_ended() {
        let Some(chunk) = chunks.take(run.chunks()) else {
            if chunks.next.load(Ordering::SeqCst) >= run.chunks()
                && !matches!(run.state(), super::MirrorState::Copying { .. })
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        if run.is_synced(chunk) {
            continue;
        }
        match copy_chunk(&mut io, run, chunk, &mut buf) {
            Ok(true) => {}
            Ok(false) => chunks.again(chunk),
            Err(why) => return run.fail(why),
        }
    }
}

/// Copies one chunk; `Ok(false)`: a guest write overlapped it, take it again.
fn copy_chunk(io: &mut EngineIo, run: &Run, chunk: usize, buf: &mut [u8]) -> Result<bool, String> {
    if !run.copy_may_begin(chunk) {
        return Ok(false);
    }
    let offset = chunk as u64 * CHUNK;
    let len = (run.capacity() - offset).min(CHUNK);
    let data = &mut buf[..host_size(len)];
    io.read(offset, data)
        .map_err(|e| format!("the copy cannot read the disk at {offset}: {e}"))?;
    let request = if data.iter().all(|&b| b == 0) {
        Remote::Zeroes {
            offset,
            len: u32::try_from(len).unwrap_or(u32::MAX),
        }
    } else {
        Remote::Write { offset, data }
    };
    run.wait(request).map_err(|e| format!("destination: {e}"))?;
    run.count_sent(len);
    Ok(run.copy_kept(chunk, len))
}
