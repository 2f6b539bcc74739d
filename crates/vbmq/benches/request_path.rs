//! The per-request CPU cost of the data path — parse, submit, complete, notify — for one
//! queue worker over a real split virtqueue in guest memory and the null engine: the part of
//! each I/O that is vbmq's own. `cargo bench --bench request_path`; under
//! `valgrind --tool=callgrind` it gives instructions per request, repeatably. The `file_` case
//! adds a real `pread` per request (4 KiB at random offsets of a 1 GiB file on tmpfs, as the
//! benchmark's disk): what a request costs the queue's CPU, without a second CPU's noise.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use vbmq::backend::{Disk, FileDisk, NullDisk};
use vbmq::guest::{GuestMemory, Vring, dirty_log};
use vbmq::test_utils::{Buffer, SplitRing, blk_header};
use vbmq::virtio_blk::BlkDevice;
use vbmq::virtio_blk::queue::{BlkQueue, BlkQueueWorker};
use vbmq::worker::QueueSettings;
use vbmq::worker::WaitMode;
use vhost_user_backend::VringT;
use virtio_bindings::virtio_blk::VIRTIO_BLK_T_IN;
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

const QUEUE_SIZE: u16 = 256;
const MEM_SIZE: usize = 1 << 24;
const BATCH: u16 = 32;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x5000;
const USED: u64 = 0x6000;
const HEADERS: u64 = 0x10_0000;
const DATA: u64 = 0x20_0000;
/// The file case's disk, in 4 KiB blocks.
const FILE_BLOCKS: u64 = 1 << 18;

/// A queue with `BATCH` three-descriptor read chains (header, 4 KiB, status) in its table.
struct Guest {
    mem: GuestMemoryAtomic<GuestMemory>,
    vring: Vring,
    ring: SplitRing,
}

impl Guest {
    fn new() -> Guest {
        let mem = GuestMemory::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
        let ring = SplitRing::new(QUEUE_SIZE, DESC, AVAIL, USED);
        for chain in 0..BATCH {
            let header = HEADERS + u64::from(chain) * 32;
            let sector = u64::from(chain) * 8;
            mem.write_slice(&blk_header(VIRTIO_BLK_T_IN, sector), GuestAddress(header))
                .unwrap();
            let buffers = [
                Buffer::readable(header, 16),
                Buffer::writable(DATA + u64::from(chain) * 4096, 4096),
                Buffer::writable(header + 16, 1),
            ];
            ring.write_chain(&mem, chain * 3, &buffers);
        }
        let mem = GuestMemoryAtomic::new(mem);
        let vring = Vring::new(mem.clone(), QUEUE_SIZE).unwrap();
        vring.set_queue_size(QUEUE_SIZE);
        vring.set_queue_info(DESC, AVAIL, USED).unwrap();
        vring.set_queue_event_idx(true);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        Guest { mem, vring, ring }
    }

    /// Points every chain's header at a random 4 KiB block of the file disk.
    fn scatter(&mut self, rng: &mut u64) {
        let mem = self.mem.memory();
        for chain in 0..BATCH {
            // xorshift64
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let sector = (*rng % FILE_BLOCKS) * 8;
            let header = HEADERS + u64::from(chain) * 32;
            mem.write_obj(sector, GuestAddress(header + 8)).unwrap();
        }
    }

    /// Makes every chain available, as a driver does for a batch.
    fn offer_batch(&mut self) {
        let heads: Vec<u16> = (0..BATCH).map(|chain| chain * 3).collect();
        self.ring.publish(&*self.mem.memory(), &heads);
    }
}

/// A random-filled file on tmpfs, opened as `vbmq serve` opens `path=` (O_DIRECT).
fn file_disk() -> (tempfile::NamedTempFile, Arc<dyn Disk>) {
    let file = tempfile::Builder::new().tempfile_in("/dev/shm").unwrap();
    let mut block = vec![0u8; 1 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for chunk in 0..FILE_BLOCKS * 4096 / block.len() as u64 {
        for word in block.chunks_exact_mut(8) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            word.copy_from_slice(&x.to_ne_bytes());
        }
        std::os::unix::fs::FileExt::write_all_at(file.as_file(), &block, chunk << 20).unwrap();
    }
    let disk = FileDisk::open(file.path(), false, true).unwrap();
    (file, Arc::new(disk))
}

fn queue_worker(guest: &Guest, disk: Arc<dyn Disk>) -> BlkQueueWorker {
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let settings = QueueSettings::unpinned(WaitMode::Event, QUEUE_SIZE);
    let stats = Default::default();
    let mut worker = BlkQueue::worker(0, settings, device, disk, guest.mem.clone(), stats);
    worker.set_up(&guest.vring, true);
    worker
}

fn request_path(c: &mut Criterion) {
    let mut guest = Guest::new();
    let mut worker = queue_worker(&guest, Arc::new(NullDisk::new(1 << 30)));
    let stop = AtomicBool::new(false);
    let mut group = c.benchmark_group("request_path");
    group.throughput(Throughput::Elements(u64::from(BATCH)));
    group.bench_function("null_read_4k_batch32", |b| {
        b.iter(|| {
            guest.offer_batch();
            worker.run(&guest.vring, &stop);
        })
    });
    {
        let mut file_guest = Guest::new();
        let (_file, disk) = file_disk();
        let mut file_worker = queue_worker(&file_guest, disk);
        let mut rng = 1;
        group.bench_function("file_read_4k_batch32", |b| {
            b.iter(|| {
                file_guest.scatter(&mut rng);
                file_guest.offer_batch();
                file_worker.run(&file_guest.vring, &stop);
            })
        });
    }
    // The same while a live migration logs dirty pages: each read's buffer, status byte and
    // used entry marked in a log as a frontend gives one.
    let log = tempfile::tempfile().unwrap();
    log.set_len(u64::try_from(MEM_SIZE / 4096 / 8).unwrap())
        .unwrap();
    dirty_log::log_to(&guest.mem.memory(), &log).unwrap();
    worker.log_dirty_pages_on(Arc::new(AtomicBool::new(true)));
    group.bench_function("null_read_4k_batch32_dirty_logging", |b| {
        b.iter(|| {
            guest.offer_batch();
            worker.run(&guest.vring, &stop);
        })
    });
    group.finish();
    let mut bits = vec![0u8; MEM_SIZE / 4096 / 8];
    std::os::unix::fs::FileExt::read_exact_at(&log, &mut bits, 0).unwrap();
    assert!(
        bits.iter().any(|&b| b != 0),
        "the logging case marked nothing"
    );
    let used: u16 = guest.mem.memory().read_obj(GuestAddress(USED + 2)).unwrap();
    assert_eq!(
        used,
        guest.ring.avail_idx(),
        "every request offered was completed"
    );
}

criterion_group!(benches, request_path);
criterion_main!(benches);
