//! Guest memory that the frontend truncates under vbmq. The battery's memory is a memfd created
//! without MFD_ALLOW_SEALING, as libblkio's is, so vbmq cannot seal it: a page past the new end
//! raises SIGBUS on access. vbmq must survive every access class, close that connection, and
//! serve the next frontend; its other disks must never notice.

use std::time::{Duration, Instant};

use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};

use super::chain::{Ctx, Seg};
use super::daemon::{Daemon, QUEUE_SIZE, VICTIM_SIZE, pattern};
use super::frontend::Guest;
use super::memory::{REGION0_SIZE, REGION1_GPA};
use super::victim::Victim;

/// What the frontend takes away.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// All of it: rings, tables and buffers (vbmq's own reads and writes fault).
    Everything,
    /// Region 1 only, where the request's data buffer is (the data copy faults; the ring and
    /// the status byte stay readable).
    DataBuffers,
}

/// Publishes one request (its data in region 1) without a kick, truncates the memory file,
/// then kicks. Returns the status byte if it can still be read and vbmq wrote one.
pub fn truncate_under_a_request(guest: &mut Guest, cut: Cut, write: bool) -> Option<u8> {
    let mut c = Ctx::new(guest);
    let kind = if write {
        VIRTIO_BLK_T_OUT
    } else {
        VIRTIO_BLK_T_IN
    };
    let hdr = c.header(kind, 8);
    let st = c.status();
    let data = if write {
        Seg::r(REGION1_GPA, 4096)
    } else {
        Seg::w(REGION1_GPA, 4096)
    };
    let head = c.direct(&[Seg::r(hdr, 16), data, Seg::w(st, 1)]);
    drop(c);
    guest.ram.write(st, &[0xff]);
    // Publish without kicking: after the cut, this process must not touch what it removed.
    guest.ring.publish(&guest.ram.mem, &[head]);
    let len = match cut {
        Cut::Everything => 0,
        // Region 1 lives past region 0 in the file (see memory.rs).
        Cut::DataBuffers => REGION0_SIZE,
    };
    guest.ram.file.set_len(len).unwrap();
    guest.kick();
    std::thread::sleep(Duration::from_millis(500));
    match cut {
        Cut::Everything => None,
        Cut::DataBuffers => Some(guest.ram.read(st, 1)[0]),
    }
}

/// Runs one case against a fresh daemon whose attacked disk has `opts`.
pub fn case(name: &str, opts: &str, cut: Cut, write: bool) {
    let daemon = Daemon::start_with(name, opts);
    let mut victim = Victim::connect(&daemon.path("victim.sock"), pattern(VICTIM_SIZE, 3));
    victim.check().unwrap();
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
    let status = truncate_under_a_request(&mut guest, cut, write);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut daemon = daemon;
    while Instant::now() < deadline && daemon.exited().is_none() {
        std::thread::sleep(Duration::from_millis(50));
        if daemon.log().contains("closing the connection") || status.is_some() {
            break;
        }
    }
    assert!(
        daemon.exited().is_none(),
        "{name}: vbmq died when guest memory shrank: {:?}\n{}",
        daemon.exited(),
        daemon.log()
    );
    if let Some(status) = status {
        // The kernel refused to copy into or out of the missing pages (EFAULT), or the access
        // faulted in vbmq and the connection was closed before any status was written.
        assert!(
            status == VIRTIO_BLK_S_IOERR as u8 || status == 0xff,
            "{name}: status {status:#x} for a request whose buffer is gone"
        );
    }
    victim
        .check()
        .unwrap_or_else(|e| panic!("{name}: the other disk: {e}"));
    drop(guest);
    super::battery::next_frontend_served_then_stop(daemon, 3, name);
}
