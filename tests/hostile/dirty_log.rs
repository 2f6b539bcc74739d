//! Dirty page logging as a migrating frontend sees it: `SET_LOG_BASE` with a shared bitmap,
//! `SET_FEATURES` with `VHOST_F_LOG_ALL`, then requests. Every guest page the device wrote
//! (data of a read, status byte, used ring) must have its bit set; once logging is off again,
//! nothing is marked.

use std::os::fd::AsRawFd;
use std::time::Duration;

use vhost::vhost_user::message::VhostUserVirtioFeatures;
use vhost::{VhostBackend, VhostUserDirtyLogRegion};
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_OK, VIRTIO_BLK_T_IN};

use super::chain::{Ctx, Seg};
use super::daemon::QUEUE_SIZE;
use super::frontend::{Guest, wanted_features};
use super::memory::{MEMORY_END, memfd};

const PAGE: u64 = 4096;

/// The frontend's log: one bit per page of guest-physical memory, in a sealed memfd.
pub struct Log {
    file: std::fs::File,
    len: u64,
}

impl Log {
    fn new() -> Log {
        let len = (MEMORY_END / PAGE).div_ceil(8).next_multiple_of(4096);
        let file = memfd(c"vhost-log", len);
        Log { file, len }
    }

    /// The pages whose bits are set.
    pub fn dirty_pages(&self) -> Vec<u64> {
        use std::os::unix::fs::FileExt;
        let mut bits = vec![0u8; self.len as usize];
        self.file.read_exact_at(&mut bits, 0).unwrap();
        (0..MEMORY_END / PAGE)
            .filter(|&page| bits[(page / 8) as usize] & (1 << (page % 8)) != 0)
            .collect()
    }

    fn clear(&self) {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(&vec![0u8; self.len as usize], 0)
            .unwrap();
    }
}

/// What one read of `len` bytes left in the log: (data pages, status page, used ring page, all
/// dirty pages).
pub struct ReadMarks {
    pub data: Vec<u64>,
    pub status: u64,
    pub used: u64,
    pub dirty: Vec<u64>,
}

fn read(guest: &mut Guest, len: u32) -> Result<(Vec<u64>, u64), String> {
    let mut c = Ctx::new(guest);
    let hdr = c.header(VIRTIO_BLK_T_IN, 0);
    // Page-aligned, so the data pages are known exactly.
    let data = c.alloc(u64::from(len), PAGE);
    let st = c.status();
    let head = c.direct(&[Seg::r(hdr, 16), Seg::w(data, len), Seg::w(st, 1)]);
    c.submit(head);
    let heads = std::mem::take(&mut c.heads);
    drop(c);
    guest.publish(&heads);
    let used = guest.wait_used(1, Duration::from_secs(10));
    if used.len() != 1 || guest.ram.read(st, 1)[0] != VIRTIO_BLK_S_OK as u8 {
        return Err(format!("the read did not complete: {} used", used.len()));
    }
    let pages = (data / PAGE..(data + u64::from(len)).div_ceil(PAGE)).collect();
    Ok((pages, st / PAGE))
}

/// Connects to `socket`, turns logging on, reads 3 pages; then turns it off and reads again.
/// Returns the marks of the first read, and the dirty pages after the second.
pub fn read_while_logging(socket: &std::path::Path) -> Result<(ReadMarks, Vec<u64>), String> {
    let mut guest = Guest::connect(socket, QUEUE_SIZE).map_err(|e| format!("connect: {e}"))?;
    guest.want_acks(true);
    let log = Log::new();
    let region = VhostUserDirtyLogRegion {
        mmap_size: log.len,
        mmap_offset: 0,
        mmap_handle: log.file.as_raw_fd(),
    };
    guest
        .frontend
        .set_log_base(0, Some(region))
        .map_err(|e| format!("SET_LOG_BASE: {e}"))?;
    let features = guest.config.features & wanted_features();
    let log_all = VhostUserVirtioFeatures::LOG_ALL.bits();
    if guest.config.features & log_all == 0 {
        return Err("vbmq does not offer VHOST_F_LOG_ALL".into());
    }
    guest
        .frontend
        .set_features(features | log_all)
        .map_err(|e| format!("SET_FEATURES with LOG_ALL: {e}"))?;
    let (data, status) = read(&mut guest, 3 * PAGE as u32)?;
    let used = guest.ring.used / PAGE;
    let marks = ReadMarks {
        data,
        status,
        used,
        dirty: log.dirty_pages(),
    };
    // A cancelled migration: logging off, nothing marked any more.
    guest
        .frontend
        .set_features(features)
        .map_err(|e| format!("SET_FEATURES without LOG_ALL: {e}"))?;
    log.clear();
    read(&mut guest, 2 * PAGE as u32)?;
    Ok((marks, log.dirty_pages()))
}

/// A log that does not cover guest memory: refused. A log whose file is shorter than the
/// mapping (`mmap` cannot tell): marking it faults, the guard gives it zero pages, and the read
/// completes.
pub fn cases(v: &mut Vec<super::vhost::VhostCase>) {
    use super::vhost::{Must, mapped, refused, running, vcase};
    v.push(vcase(
        "SET_LOG_BASE with a log smaller than guest memory",
        Must::BeRefused,
        |s| {
            let g = mapped(s)?;
            let file = memfd(c"vhost-log", 4096);
            let region = VhostUserDirtyLogRegion {
                mmap_size: 8,
                mmap_offset: 0,
                mmap_handle: file.as_raw_fd(),
            };
            refused(g.frontend.set_log_base(0, Some(region)))
        },
    ));
    v.push(vcase(
        "SET_LOG_BASE with a log past the end of its file, then reads",
        Must::Survive,
        |s| {
            let mut g = running(s)?;
            let file = memfd(c"vhost-log", 0);
            let region = VhostUserDirtyLogRegion {
                mmap_size: 1 << 20,
                mmap_offset: 0,
                mmap_handle: file.as_raw_fd(),
            };
            g.frontend
                .set_log_base(0, Some(region))
                .map_err(|e| e.to_string())?;
            let features = g.config.features & wanted_features();
            g.frontend
                .set_features(features | VhostUserVirtioFeatures::LOG_ALL.bits())
                .map_err(|e| e.to_string())?;
            let _ = read(&mut g, PAGE as u32);
            Ok(false)
        },
    ));
}
