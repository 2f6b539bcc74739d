//! The per-request CPU cost of the data path — parse, submit, complete, notify — for one
//! queue worker over a real split virtqueue in guest memory and the null engine: the part of
//! each I/O that is vbmq's own. `cargo bench --bench request_path`; under
//! `valgrind --tool=callgrind` it gives instructions per request, repeatably.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vbmq::backend::{Disk, NullDisk};
use vbmq::virtio_blk::BlkDevice;
use vbmq::worker::WaitMode;
use vbmq::worker::{QueueSettings, QueueWorker};
use vhost_user_backend::{VringRwLock, VringT};
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryMmap};

const QUEUE_SIZE: u16 = 256;
const BATCH: u16 = 32;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x5000;
const USED: u64 = 0x6000;
const HEADERS: u64 = 0x10_0000;
const DATA: u64 = 0x20_0000;

/// A queue with `BATCH` three-descriptor read chains (header, 4 KiB, status) in its table.
struct Guest {
    mem: GuestMemoryAtomic<GuestMemoryMmap>,
    vring: VringRwLock,
    avail_idx: u16,
}

impl Guest {
    fn new() -> Guest {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 24)]).unwrap();
        for chain in 0..u64::from(BATCH) {
            let header = HEADERS + chain * 32;
            let mut raw = [0u8; 16];
            raw[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
            raw[8..16].copy_from_slice(&(chain * 8).to_le_bytes());
            mem.write_slice(&raw, GuestAddress(header)).unwrap();
            let descs = [
                (header, 16, VRING_DESC_F_NEXT),
                (
                    DATA + chain * 4096,
                    4096,
                    VRING_DESC_F_NEXT | VRING_DESC_F_WRITE,
                ),
                (header + 16, 1, VRING_DESC_F_WRITE),
            ];
            for (i, (addr, len, flags)) in descs.into_iter().enumerate() {
                let index = chain * 3 + i as u64;
                let mut raw = [0u8; 16];
                raw[0..8].copy_from_slice(&addr.to_le_bytes());
                raw[8..12].copy_from_slice(&(len as u32).to_le_bytes());
                raw[12..14].copy_from_slice(&(flags as u16).to_le_bytes());
                raw[14..16].copy_from_slice(&(index as u16 + 1).to_le_bytes());
                mem.write_slice(&raw, GuestAddress(DESC + index * 16))
                    .unwrap();
            }
        }
        let mem = GuestMemoryAtomic::new(mem);
        let vring = VringRwLock::new(mem.clone(), QUEUE_SIZE).unwrap();
        vring.set_queue_size(QUEUE_SIZE);
        vring.set_queue_info(DESC, AVAIL, USED).unwrap();
        vring.set_queue_event_idx(true);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        Guest {
            mem,
            vring,
            avail_idx: 0,
        }
    }

    /// Makes every chain available, as a driver does for a batch.
    fn offer_batch(&mut self) {
        let mem = self.mem.memory();
        for chain in 0..BATCH {
            let slot = u64::from(self.avail_idx.wrapping_add(chain) % QUEUE_SIZE);
            mem.write_obj((chain * 3).to_le(), GuestAddress(AVAIL + 4 + slot * 2))
                .unwrap();
        }
        self.avail_idx = self.avail_idx.wrapping_add(BATCH);
        mem.write_obj(self.avail_idx.to_le(), GuestAddress(AVAIL + 2))
            .unwrap();
    }
}

fn worker(guest: &Guest) -> QueueWorker {
    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 30));
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let settings = QueueSettings {
        mode: WaitMode::Event,
        poll: Duration::ZERO,
        cpu: None,
        batch: true,
        max_size: QUEUE_SIZE,
    };
    let stats = Default::default();
    let mut worker = QueueWorker::new(0, settings, device, disk, guest.mem.clone(), stats);
    worker.set_up(&guest.vring);
    worker
}

fn request_path(c: &mut Criterion) {
    let mut guest = Guest::new();
    let mut worker = worker(&guest);
    let stop = AtomicBool::new(false);
    let mut group = c.benchmark_group("request_path");
    group.throughput(Throughput::Elements(u64::from(BATCH)));
    group.bench_function("null_read_4k_batch32", |b| {
        b.iter(|| {
            guest.offer_batch();
            worker.run(&guest.vring, &stop);
        })
    });
    group.finish();
    let used: u16 = guest.mem.memory().read_obj(GuestAddress(USED + 2)).unwrap();
    assert_eq!(used, guest.avail_idx, "every request offered was completed");
}

criterion_group!(benches, request_path);
criterion_main!(benches);
