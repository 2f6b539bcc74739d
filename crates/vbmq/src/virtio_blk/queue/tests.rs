//! A worker over a real split queue in guest memory, driven as the vhost-user glue drives it.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::guest::{GuestMemory, Vring};
use vhost_user_backend::VringT;
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

use super::requests::Requests;
use super::{BlkQueue, BlkQueueWorker};
use crate::backend::{Disk, NullDisk};
use crate::virtio_blk::BlkDevice;
use crate::worker::ServedQueue as _;
use crate::worker::{QueueSettings, WaitMode};
use vbmq_driver::{Buffer, SplitRing, blk_header};

pub(super) const SIZE: u16 = 16;
pub(super) const DESC: u64 = 0x1000;
pub(super) const AVAIL: u64 = 0x2000;
pub(super) const USED: u64 = 0x3000;

/// An event-mode worker for queue 0 of `device` over `disk`, reading guest memory `atomic`.
pub(super) fn event_worker(
    device: Arc<BlkDevice>,
    disk: Arc<dyn Disk>,
    atomic: &GuestMemoryAtomic<GuestMemory>,
) -> BlkQueueWorker {
    let settings = QueueSettings::unpinned(WaitMode::Event, SIZE);
    BlkQueue::worker(
        0,
        settings,
        device,
        disk,
        atomic.clone(),
        Default::default(),
    )
}

/// The ring at `DESC`, `AVAIL` and `USED` in `atomic`, started and enabled, with `worker` set up
/// on it.
pub(super) fn started_vring(
    atomic: &GuestMemoryAtomic<GuestMemory>,
    worker: &mut BlkQueueWorker,
) -> Vring {
    let vring = Vring::new(atomic.clone(), SIZE).unwrap();
    vring.set_queue_size(SIZE);
    vring.set_queue_info(DESC, AVAIL, USED).unwrap();
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    worker.set_up(&vring, true);
    vring
}

/// A queue's requests over `device` with `inflight`, no engine, no record.
fn without_engine(device: BlkDevice, inflight: super::inflight::InFlight) -> Requests {
    Requests {
        engine: None,
        device: Arc::new(device),
        inflight,
        stats: Arc::default(),
        record: None,
        dirty_logging: Arc::default(),
        clock: 0,
    }
}

fn guest_memory() -> GuestMemory {
    GuestMemory::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap()
}

/// Writes a 4 KiB read at descriptor 0 and makes it available.
fn offer_read(mem: &GuestMemory) {
    mem.write_slice(&blk_header(VIRTIO_BLK_T_IN, 0), GuestAddress(0x8000))
        .unwrap();
    mem.write_obj(0xffu8, GuestAddress(0x8010)).unwrap();
    let mut ring = SplitRing::new(SIZE, DESC, AVAIL, USED);
    let buffers = [
        Buffer::readable(0x8000, 16),
        Buffer::writable(0x10000, 4096),
        Buffer::writable(0x8010, 1),
    ];
    let head = ring.write_chain(mem, 0, &buffers);
    ring.publish(mem, &[head]);
}

fn worker(mode: WaitMode, atomic: &GuestMemoryAtomic<GuestMemory>) -> BlkQueueWorker {
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let settings = QueueSettings::unpinned(mode, SIZE);
    BlkQueue::worker(
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
        let atomic = GuestMemoryAtomic::new(GuestMemory::new());
        let mut worker = worker(mode, &atomic);
        let vring = Vring::new(atomic.clone(), SIZE).unwrap();
        // SET_MEM_TABLE, then the vring set up and enabled, then the first request.
        let mem = guest_memory();
        offer_read(&mem);
        atomic.lock().unwrap().replace(mem);
        vring.set_queue_size(SIZE);
        vring.set_queue_info(DESC, AVAIL, USED).unwrap();
        vring.set_queue_event_idx(event_idx);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        worker.set_up(&vring, true);
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
        let vring = started_vring(&atomic, &mut worker);
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

/// GET_ID's 20 bytes split across two buffers, the second also holding the status (legal
/// message framing): the serial lands in both pieces, in order.
#[test]
fn get_id_split_across_buffers_gets_the_whole_serial() {
    let mem = guest_memory();
    mem.write_slice(
        &blk_header(virtio_bindings::virtio_blk::VIRTIO_BLK_T_GET_ID, 0),
        GuestAddress(0x8000),
    )
    .unwrap();
    let mut ring = SplitRing::new(SIZE, DESC, AVAIL, USED);
    let buffers = [
        Buffer::readable(0x8000, 10),
        Buffer::readable(0x800a, 6),
        Buffer::writable(0x10000, 7),
        Buffer::writable(0x11000, 13 + 1),
    ];
    let head = ring.write_chain(&mem, 0, &buffers);
    ring.publish(&mem, &[head]);
    mem.write_obj(0xffu8, GuestAddress(0x11000 + 13)).unwrap();
    let atomic = GuestMemoryAtomic::new(mem);
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let serial = "serial-of-twenty-chr";
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, serial));
    let mut worker = event_worker(device, disk, &atomic);
    let vring = started_vring(&atomic, &mut worker);
    worker.run(&vring, &AtomicBool::new(false));
    let mem = atomic.memory();
    let mut id = [0u8; 20];
    mem.read_slice(&mut id[..7], GuestAddress(0x10000)).unwrap();
    mem.read_slice(&mut id[7..], GuestAddress(0x11000)).unwrap();
    assert_eq!(&id, serial.as_bytes());
    assert_eq!(mem.read_obj::<u8>(GuestAddress(0x11000 + 13)).unwrap(), 0);
}

/// A batch the used ring cannot wholly take (its end not mapped, as while a frontend changes its
/// memory table region by region): the entries it did not take are kept, and published once it
/// can take them, none lost.
#[test]
fn finished_requests_the_used_ring_cannot_take_yet_are_kept() {
    use super::inflight::InFlight;
    use virtio_queue::{Queue, QueueT};

    const END: u64 = 0x4000;
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), END as usize)]).unwrap();
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let device = BlkDevice::new(disk.as_ref(), false, 1, "");
    let mut inflight = InFlight::new(usize::from(SIZE));
    let mut queue = Queue::new(SIZE).unwrap();
    queue.set_size(SIZE);
    queue.set_desc_table_address(Some(DESC as u32), Some(0));
    queue.set_avail_ring_address(Some(AVAIL as u32), Some(0));
    // Used entries 0..=13 lie inside guest memory, 14 and 15 past its end.
    let short_used = END - 4 - 8 * 14;
    queue.set_used_ring_address(Some(short_used as u32), Some(0));
    queue.set_ready(true);
    queue.set_next_used(13);
    inflight.finished.extend([(1, 10), (2, 20), (3, 30)]);
    let mem = Arc::new(mem);
    let mut requests = without_engine(device, inflight);
    let mut ctx = requests.ctx(0, &mem);
    assert_eq!(ctx.publish_finished(&mut queue), 1);
    assert_eq!(
        ctx.inflight.finished,
        [(2, 20), (3, 30)],
        "entries forgotten"
    );
    assert_eq!(
        mem.read_obj::<u16>(GuestAddress(short_used + 2)).unwrap(),
        14
    );
    // The ring where all of it is mapped: the rest goes out.
    queue.set_used_ring_address(Some(USED as u32), Some(0));
    assert_eq!(ctx.publish_finished(&mut queue), 2);
    assert!(ctx.inflight.finished.is_empty());
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 16);
    for (slot, (id, len)) in [(14u64, (2u32, 20u32)), (15, (3, 30))] {
        let at = USED + 4 + 8 * slot;
        assert_eq!(mem.read_obj::<u32>(GuestAddress(at)).unwrap(), id);
        assert_eq!(mem.read_obj::<u32>(GuestAddress(at + 4)).unwrap(), len);
    }
}

/// An engine that takes operations and never completes them, and whose every wait fails (a
/// device gone bad): it says whether it was dropped with operations in it.
struct StuckEngine {
    pending: usize,
    dropped_with_pending: Arc<AtomicBool>,
}

impl crate::backend::Engine for StuckEngine {
    fn push(&mut self, _: crate::backend::IoOp, _: u64) -> std::io::Result<()> {
        self.pending += 1;
        Ok(())
    }
    fn submit(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn wait(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::other("the device does not answer"))
    }
    fn reap(&mut self, _: &mut dyn FnMut(u64, i32)) {}
    fn completion_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

impl Drop for StuckEngine {
    fn drop(&mut self) {
        if self.pending > 0 {
            self.dropped_with_pending
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// `drain` gives up on a request the engine never returns (its waits fail): the guest memory the
/// request points into stays mapped and its engine is never dropped (an io_uring dropped with
/// operations in it lets the kernel write into memory unmapped meanwhile), not when the frontend
/// replaces the memory table, not when the engine is taken back, not when the worker goes.
#[test]
fn a_drain_that_gives_up_frees_neither_memory_nor_engine() {
    use std::sync::atomic::Ordering;
    let mem = guest_memory();
    offer_read(&mem);
    let atomic = GuestMemoryAtomic::new(mem);
    let old_memory = Arc::downgrade(&atomic.memory().into_inner());
    let mut worker = worker(WaitMode::Event, &atomic);
    let dropped_with_pending = Arc::new(AtomicBool::new(false));
    worker.lend_engine(Some(Box::new(StuckEngine {
        pending: 0,
        dropped_with_pending: dropped_with_pending.clone(),
    })));
    let vring = started_vring(&atomic, &mut worker);
    worker.run(&vring, &AtomicBool::new(false));
    assert_eq!(worker.in_flight(), 1);
    // A new memory table: the worker must keep the old one while the read may land in it.
    atomic.lock().unwrap().replace(guest_memory());
    worker.begin_polling(&vring);
    assert!(
        old_memory.upgrade().is_some(),
        "the old guest memory was let go with a request in flight"
    );
    assert!(worker.take_engine().is_none());
    assert!(
        !dropped_with_pending.load(Ordering::SeqCst),
        "the engine was dropped with a request in it"
    );
    drop(worker);
    assert!(!dropped_with_pending.load(Ordering::SeqCst));
    assert!(old_memory.upgrade().is_some());
}

/// A disk modelled by its length only: a write reaching past the end grows it, as `pwrite`
/// grows a file; its engine holds every operation until the test lets them go.
struct GrowingDisk {
    len: Arc<std::sync::Mutex<u64>>,
    release: Arc<AtomicBool>,
}

struct HeldEngine {
    len: Arc<std::sync::Mutex<u64>>,
    release: Arc<AtomicBool>,
    held: Vec<(u64, crate::backend::IoOp)>,
}

impl Disk for GrowingDisk {
    fn geometry(&self) -> crate::backend::Geometry {
        crate::backend::Geometry {
            capacity: *self.len.lock().unwrap(),
            block_size: 512,
            physical_block_exp: 0,
        }
    }
    fn engine(
        &self,
        _: crate::backend::EngineOptions,
    ) -> std::io::Result<Box<dyn crate::backend::Engine>> {
        Ok(Box::new(HeldEngine {
            len: self.len.clone(),
            release: self.release.clone(),
            held: Vec::new(),
        }))
    }
    fn supports_discard(&self) -> bool {
        false
    }
    fn resize(&self, bytes: u64, _shrink: bool) -> std::io::Result<u64> {
        *self.len.lock().unwrap() = bytes;
        Ok(bytes)
    }
}

// SAFETY: the held operations' iovecs point into guest memory the worker keeps mapped until
// they complete; the engine moves between threads only with its worker.
unsafe impl Send for HeldEngine {}

impl crate::backend::Engine for HeldEngine {
    fn push(&mut self, op: crate::backend::IoOp, tag: u64) -> std::io::Result<()> {
        self.held.push((tag, op));
        Ok(())
    }
    fn submit(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn wait(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        if !self.release.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        for (tag, op) in self.held.drain(..) {
            let moved = match op {
                crate::backend::IoOp::Write { offset, iov } => {
                    let mut len = self.len.lock().unwrap();
                    *len = (*len).max(offset + iov.len() as u64);
                    i32::try_from(iov.len()).unwrap()
                }
                _ => 0,
            };
            done(tag, moved);
        }
    }
    fn completion_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// A shrinking resize while a write near the old end is in flight: the write must not land after
/// the cut (it would grow the file again). The resize waits for it, then cuts.
#[test]
fn a_shrinking_resize_waits_for_writes_in_flight() {
    use std::sync::atomic::Ordering;
    const BEFORE: u64 = 1 << 20;
    const AFTER: u64 = 512 << 10;
    let len = Arc::new(std::sync::Mutex::new(BEFORE));
    let release = Arc::new(AtomicBool::new(false));
    let disk: Arc<dyn Disk> = Arc::new(GrowingDisk {
        len: len.clone(),
        release: release.clone(),
    });
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let mem = guest_memory();
    let sector = (BEFORE - 4096) / 512;
    mem.write_slice(
        &blk_header(virtio_bindings::virtio_blk::VIRTIO_BLK_T_OUT, sector),
        GuestAddress(0x8000),
    )
    .unwrap();
    let mut ring = SplitRing::new(SIZE, DESC, AVAIL, USED);
    let buffers = [
        Buffer::readable(0x8000, 16),
        Buffer::readable(0x10000, 4096),
        Buffer::writable(0x8010, 1),
    ];
    let head = ring.write_chain(&mem, 0, &buffers);
    ring.publish(&mem, &[head]);
    let atomic = GuestMemoryAtomic::new(mem);
    let mut worker = event_worker(device.clone(), disk.clone(), &atomic);
    let vring = started_vring(&atomic, &mut worker);
    let stop = AtomicBool::new(false);
    worker.run(&vring, &stop);
    assert_eq!(worker.in_flight(), 1, "the write is held in flight");
    std::thread::scope(|scope| {
        let resize = scope.spawn(|| {
            crate::virtio_blk::resize_disk(
                &device,
                disk.as_ref(),
                AFTER,
                true,
                Duration::from_secs(5),
            )
        });
        std::thread::sleep(Duration::from_millis(100));
        // The write lands now, then completes.
        release.store(true, Ordering::SeqCst);
        worker.run(&vring, &stop);
        assert_eq!(resize.join().unwrap(), Ok(AFTER));
    });
    assert_eq!(worker.in_flight(), 0);
    assert_eq!(
        *len.lock().unwrap(),
        AFTER,
        "a write in flight grew the storage again after the shrink"
    );
    assert_eq!(device.capacity(), AFTER);
}

/// A used ring whose index cannot be written (a hole in guest memory under it) while its entries
/// can: nothing was published, so nothing is forgotten.
#[test]
fn finished_requests_whose_used_index_cannot_be_written_are_kept() {
    use super::inflight::InFlight;
    use virtio_queue::{Queue, QueueT};

    let mem =
        GuestMemory::from_ranges(&[(GuestAddress(0), 0x1000), (GuestAddress(0x2000), 0x1000)])
            .unwrap();
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let device = BlkDevice::new(disk.as_ref(), false, 1, "");
    let mut inflight = InFlight::new(usize::from(SIZE));
    let mut queue = Queue::new(SIZE).unwrap();
    queue.set_size(SIZE);
    // The used index at 0x1ffe lies in the hole; the entries from 0x2000 on do not.
    queue.set_used_ring_address(Some(0x1ffc), Some(0));
    queue.set_ready(true);
    inflight.finished.extend([(1, 10), (2, 20)]);
    let mem = Arc::new(mem);
    let mut requests = without_engine(device, inflight);
    let mut ctx = requests.ctx(0, &mem);
    assert_eq!(ctx.publish_finished(&mut queue), 0);
    assert_eq!(
        queue.next_used(),
        0,
        "entries counted the driver cannot see"
    );
    assert_eq!(
        ctx.inflight.finished,
        [(1, 10), (2, 20)],
        "entries forgotten"
    );
}
