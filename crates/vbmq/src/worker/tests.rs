//! A worker over a real split queue in guest memory, driven as the vhost-user glue drives it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

use super::{QueueSettings, QueueWorker};
use crate::backend::{Disk, NullDisk};
use crate::virtio_blk::BlkDevice;
use crate::worker::WaitMode;

const SIZE: u16 = 16;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;

fn guest_memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
}

/// Writes a 4 KiB read at descriptor 0 and makes it available.
fn offer_read(mem: &GuestMemoryMmap) {
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
    mem.write_slice(&header, GuestAddress(0x8000)).unwrap();
    mem.write_obj(0xffu8, GuestAddress(0x8010)).unwrap();
    let descs = [
        (0x8000u64, 16u32, VRING_DESC_F_NEXT as u16, 1u16),
        (
            0x10000,
            4096,
            (VRING_DESC_F_NEXT | VRING_DESC_F_WRITE) as u16,
            2,
        ),
        (0x8010, 1, VRING_DESC_F_WRITE as u16, 0),
    ];
    for (i, (addr, len, flags, next)) in descs.into_iter().enumerate() {
        let at = GuestAddress(DESC + i as u64 * 16);
        mem.write_obj(addr.to_le(), at).unwrap();
        mem.write_obj(len.to_le(), GuestAddress(at.0 + 8)).unwrap();
        mem.write_obj(flags.to_le(), GuestAddress(at.0 + 12))
            .unwrap();
        mem.write_obj(next.to_le(), GuestAddress(at.0 + 14))
            .unwrap();
    }
    mem.write_obj(0u16, GuestAddress(AVAIL + 4)).unwrap();
    mem.write_obj(1u16.to_le(), GuestAddress(AVAIL + 2))
        .unwrap();
}

fn worker(mode: WaitMode, atomic: &GuestMemoryAtomic<GuestMemoryMmap>) -> QueueWorker {
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let settings = QueueSettings {
        mode,
        poll: Duration::ZERO,
        cpu: None,
        batch: true,
        max_size: SIZE,
    };
    QueueWorker::new(
        0,
        settings,
        device,
        disk,
        atomic.clone(),
        Default::default(),
    )
}

/// The worker is created before the frontend's memory table arrives (as on every connection):
/// the first request after it, such as a VM BIOS's first read, must still be served.
#[test]
fn first_request_after_the_memory_table_is_served_in_every_mode() {
    let modes = [WaitMode::Event, WaitMode::Poll, WaitMode::Adaptive];
    // Without EVENT_IDX (a BIOS driver) notifications are flags in the used ring.
    for (mode, event_idx) in modes.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let atomic = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let mut worker = worker(mode, &atomic);
        let vring = VringRwLock::new(atomic.clone(), SIZE).unwrap();
        // SET_MEM_TABLE, then the vring set up and enabled, then the first request.
        let mem = guest_memory();
        offer_read(&mem);
        atomic.lock().unwrap().replace(mem);
        vring.set_queue_size(SIZE);
        vring.set_queue_info(DESC, AVAIL, USED).unwrap();
        vring.set_queue_event_idx(event_idx);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        worker.set_up(&vring);
        let stop = AtomicBool::new(false);
        if mode == WaitMode::Event {
            worker.run(&vring, &stop);
        } else {
            // Poll and adaptive spin until told to stop: run them on another thread and stop
            // them once the request is back.
            std::thread::scope(|scope| {
                scope.spawn(|| worker.run(&vring, &stop));
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while atomic
                    .memory()
                    .read_obj::<u16>(GuestAddress(USED + 2))
                    .unwrap()
                    == 0
                {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{mode:?}: never served"
                    );
                    std::thread::yield_now();
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            });
        }
        let mem = atomic.memory();
        assert_eq!(
            mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(),
            1,
            "{mode:?}"
        );
        assert_eq!(
            mem.read_obj::<u8>(GuestAddress(0x8010)).unwrap(),
            0,
            "{mode:?}: status"
        );
    }
}

/// An avail index more than a ring ahead: event mode once spun on it forever.
/// Event and adaptive workers must go back to sleep; nothing is taken from the broken ring.
#[test]
fn avail_index_past_the_ring_does_not_spin() {
    for mode in [WaitMode::Event, WaitMode::Adaptive] {
        let mem = guest_memory();
        offer_read(&mem);
        mem.write_obj((SIZE + 5).to_le(), GuestAddress(AVAIL + 2))
            .unwrap();
        let atomic = GuestMemoryAtomic::new(mem);
        let mut worker = worker(mode, &atomic);
        let vring = VringRwLock::new(atomic.clone(), SIZE).unwrap();
        vring.set_queue_size(SIZE);
        vring.set_queue_info(DESC, AVAIL, USED).unwrap();
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        worker.set_up(&vring);
        // A detached thread: if the worker spins, the test fails instead of hanging.
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            worker.run(&vring, &AtomicBool::new(false));
            let _ = done_tx.send(());
        });
        let returned = done_rx.recv_timeout(Duration::from_secs(5)).is_ok();
        assert!(
            returned,
            "{mode:?}: the worker kept spinning on a broken ring"
        );
        let used: u16 = atomic.memory().read_obj(GuestAddress(USED + 2)).unwrap();
        assert_eq!(used, 0, "{mode:?}");
    }
}
