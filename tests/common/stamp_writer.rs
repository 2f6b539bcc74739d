//! A writer of generation-stamped blocks (tests/common/stamps.rs) through libblkio, that never
//! pauses until told to stop: tests/snapshot.rs and tests/nbd_export.rs take their instants
//! under it (`#[path]`-included by each, beside `common` and `stamps`).
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::common::Client;
use super::stamps::{BLOCK, order, rank, stamp};

/// Writes stamped blocks one at a time until told to stop. `started` is the rank of the write
/// under way plus one, `done` the rank of the last completed plus one.
pub struct Writer {
    pub started: Arc<AtomicU64>,
    pub done: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    pub fn start(socket: &Path, blocks: u64) -> Writer {
        let started = Arc::new(AtomicU64::new(blocks));
        let done = Arc::new(AtomicU64::new(blocks));
        let stop = Arc::new(AtomicBool::new(false));
        let mut client = Client::connect(socket, 1, false).expect("connect");
        let thread = {
            let (started, done, stop) = (started.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                for generation in 1.. {
                    for step in 0..blocks {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let block = order(blocks, step);
                        let rank = rank(blocks, generation, block);
                        started.store(rank + 1, Ordering::SeqCst);
                        let data = stamp(block, generation);
                        let offset = block * BLOCK as u64;
                        assert_eq!(client.write(0, offset, &data), 0, "write {rank}");
                        done.store(rank + 1, Ordering::SeqCst);
                    }
                }
            })
        };
        Writer {
            started,
            done,
            stop,
            thread,
        }
    }

    /// Waits until `writes` more writes completed (the load is under way).
    pub fn wait_writes(&self, writes: u64) {
        let from = self.done.load(Ordering::SeqCst);
        while self.done.load(Ordering::SeqCst) < from + writes {
            assert!(!self.thread.is_finished(), "the writer ended");
            std::thread::yield_now();
        }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the writer failed");
    }
}
