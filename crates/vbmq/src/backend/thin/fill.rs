//! `base-fill=on`: a background thread copies every block DISK lacks from BASE, a batch at a
//! time with a pause between batches, so that BASE can be retired once it is done. It claims
//! blocks as the queues' engines do, so a guest write to a block being filled waits for it.
//! A block is read from BASE before it is claimed (BASE never changes, and a block written
//! meanwhile is found present once claimed, and skipped), so a guest write never waits for a
//! base that is slow or away: an NBD base's fill waits for its server to come back, and goes on.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{error, info};

use super::base::BaseReader;
use super::map::ThinMap;
use crate::host_size;

/// Blocks copied between two commits.
const BATCH: usize = 16;
/// Rest between batches: the guest's I/O comes first.
const PAUSE: Duration = Duration::from_millis(2);
/// Rest before asking a base that failed again.
const RETRY: Duration = Duration::from_millis(200);

/// Starts the fill of `data` from `base`; it stops when `stop` is set.
pub fn start(
    map: Arc<ThinMap>,
    base: BaseReader,
    data: File,
    stop: Arc<AtomicBool>,
    name: String,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vbmq-fill".into())
        .spawn(move || match fill(&map, &base, &data, &stop) {
            Ok(true) => info!(
                "{name}: filled from its base ({} blocks): the base is no longer read",
                map.blocks()
            ),
            Ok(false) => info!(
                "{name}: fill stopped at {} of {} blocks",
                map.present_count(),
                map.blocks()
            ),
            Err(e) => error!("{name}: background fill failed: {e}"),
        })
}

/// Copies every block; true when all are present.
fn fill(map: &ThinMap, base: &BaseReader, data: &File, stop: &AtomicBool) -> io::Result<bool> {
    let bs = map.block_size();
    let mut buf = vec![0u8; host_size(bs)];
    let mut batch = Vec::with_capacity(BATCH);
    let mut block = 0;
    while block < map.blocks() || !batch.is_empty() {
        if stop.load(Ordering::Relaxed) {
            release(map, &batch);
            return Ok(false);
        }
        if block < map.blocks() && batch.len() < BATCH {
            let len = host_size(map.block_len(block));
            if !map.is_present(block) {
                if let Err(e) = read_base(base, &mut buf[..len], block * bs, stop) {
                    release(map, &batch);
                    return Err(e);
                }
                if map.try_claim(block) {
                    if map.is_present(block) {
                        map.release(block);
                    } else {
                        batch.push(block);
                        if let Err(e) = data.write_all_at(&buf[..len], block * bs) {
                            release(map, &batch);
                            return Err(e);
                        }
                    }
                }
            }
            block += 1;
            continue;
        }
        let committed = map.commit(&batch);
        release(map, &batch);
        committed?;
        batch.clear();
        std::thread::sleep(PAUSE);
    }
    // Blocks claimed by a queue while the fill passed are that queue's to copy.
    Ok(map.present_count() == map.blocks())
}

/// Reads a block of BASE; a base that may come back (an NBD export) is tried again until it
/// answers or the fill is stopped.
fn read_base(base: &BaseReader, buf: &mut [u8], offset: u64, stop: &AtomicBool) -> io::Result<()> {
    loop {
        match base.read_at(buf, offset) {
            Err(e) if base.retries() && !stop.load(Ordering::Relaxed) => {
                crate::limited!(
                    warn,
                    "background fill: the base did not answer ({e}); waiting"
                );
                std::thread::sleep(RETRY);
            }
            other => return other,
        }
    }
}

fn release(map: &ThinMap, blocks: &[u64]) {
    for &block in blocks {
        map.release(block);
    }
}
