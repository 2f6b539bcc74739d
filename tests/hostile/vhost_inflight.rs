//! The in-flight tracking messages (`GET_INFLIGHT_FD`, `SET_INFLIGHT_FD`) with sizes the device
//! cannot hold, files a frontend could shrink or that are too short, and a region full of
//! garbage: each refused, or survived.

use std::fs::File;
use std::os::fd::AsRawFd;

use vhost::vhost_user::VhostUserFrontend;
use vhost::vhost_user::message::VhostUserInflight;

use super::daemon::{QUEUE_SIZE, TARGET_QUEUES};
use super::frontend::Guest;
use super::vhost::{Must, VhostCase, acked, refused, running, vcase};

fn ask(num_queues: u16, queue_size: u16) -> VhostUserInflight {
    VhostUserInflight {
        mmap_size: 0,
        mmap_offset: 0,
        num_queues,
        queue_size,
    }
}

/// The in-flight region vbmq makes for `queues` queues of `size` entries, and its file.
fn inflight_region(
    g: &mut Guest,
    queues: u16,
    size: u16,
) -> Result<(VhostUserInflight, File), String> {
    g.frontend
        .get_inflight_fd(&ask(queues, size))
        .map_err(|e| e.to_string())
}

pub fn cases(v: &mut Vec<VhostCase>) {
    for (queues, size) in [
        (0, QUEUE_SIZE),
        (TARGET_QUEUES + 1, QUEUE_SIZE),
        (u16::MAX, QUEUE_SIZE),
        (1, 0),
        (1, 100),
        (1, u16::MAX),
    ] {
        v.push(vcase(
            format!("GET_INFLIGHT_FD for {queues} queues of {size} entries"),
            Must::BeRefused,
            move |s| refused(acked(s)?.frontend.get_inflight_fd(&ask(queues, size))),
        ));
    }
    v.push(vcase(
        "SET_INFLIGHT_FD with a file not sealed against shrinking",
        Must::BeRefused,
        |s| {
            let mut g = acked(s)?;
            let file = tempfile::tempfile().map_err(|e| e.to_string())?;
            file.set_len(1 << 20).map_err(|e| e.to_string())?;
            let region = VhostUserInflight {
                mmap_size: 1 << 20,
                ..ask(1, QUEUE_SIZE)
            };
            refused(g.frontend.set_inflight_fd(&region, file.as_raw_fd()))
        },
    ));
    for (what, change) in [
        ("smaller than its queues need", 0usize),
        ("past the end of its file", 1),
        ("at an unaligned offset", 2),
        ("for more queues than it was made for", 3),
    ] {
        v.push(vcase(
            format!("SET_INFLIGHT_FD with a region {what}"),
            Must::BeRefused,
            move |s| {
                let mut g = acked(s)?;
                let (mut region, file) = inflight_region(&mut g, 1, QUEUE_SIZE)?;
                match change {
                    0 => region.mmap_size /= 2,
                    1 => region.mmap_offset = region.mmap_size.next_multiple_of(4096),
                    2 => region.mmap_offset = 8,
                    _ => region.num_queues = TARGET_QUEUES,
                }
                refused(g.frontend.set_inflight_fd(&region, file.as_raw_fd()))
            },
        ));
    }
    v.push(vcase(
        "SET_INFLIGHT_FD with every descriptor marked in flight, then the ring started",
        Must::Survive,
        |s| {
            let mut g = acked(s)?;
            let (region, file) = inflight_region(&mut g, TARGET_QUEUES, QUEUE_SIZE)?;
            // Garbage everywhere, but a version the backend reads: every head "in flight",
            // counters and batch links pointing anywhere.
            let mut bytes = vec![0xffu8; usize::try_from(region.mmap_size).unwrap()];
            let record = bytes.len() / usize::from(TARGET_QUEUES);
            for queue in 0..usize::from(TARGET_QUEUES) {
                bytes[queue * record + 8..queue * record + 10].copy_from_slice(&1u16.to_le_bytes());
            }
            std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0)
                .map_err(|e| e.to_string())?;
            g.frontend
                .set_inflight_fd(&region, file.as_raw_fd())
                .map_err(|e| e.to_string())?;
            drop(g);
            // A frontend that then sets memory and rings up on the same region.
            let mut g = running(s)?;
            let _ = g.frontend.set_inflight_fd(&region, file.as_raw_fd());
            let _ = g.start_queue(0, QUEUE_SIZE);
            g.kick();
            std::thread::sleep(std::time::Duration::from_millis(50));
            Ok(false)
        },
    ));
    v.push(vcase(
        "GET_INFLIGHT_FD and SET_INFLIGHT_FD as QEMU sends them",
        Must::Survive,
        |s| {
            let mut g = acked(s)?;
            let (region, file) = inflight_region(&mut g, TARGET_QUEUES, QUEUE_SIZE)?;
            let accepted = g
                .frontend
                .set_inflight_fd(&region, file.as_raw_fd())
                .is_ok();
            if !accepted {
                return Err("a region vbmq made itself was refused".into());
            }
            Ok(false)
        },
    ));
}
