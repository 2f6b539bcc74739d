//! The per-request CPU cost of a virtio-fs READ — ring, chain walk, request copy, FUSE
//! dispatch, passthrough, `preadv` into guest memory, used ring — for one queue worker over a
//! real split virtqueue and a share of a 256 MiB random-filled file on tmpfs, beside the host's
//! own `pread` of the same file. One thread, no second CPU: the figure a loaded machine still
//! gives (`vbmq bench --only fs` needs two quiet CPUs). `cargo bench --bench fs_request_path`;
//! `perf record` on it splits the cost by layer.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fuse_backend_rs::abi::fuse_abi::{
    EntryOut, InHeader, InitIn, KERNEL_MINOR_VERSION, KERNEL_VERSION, Opcode, OpenIn, OpenOut,
    OutHeader, ReadIn,
};
use vbmq::guest::{GuestMemory, Vring};
use vbmq::test_utils::{Buffer, SplitRing};
use vbmq::virtio_fs::FsDevice;
use vbmq::virtio_fs::queue::{FsQueue, FsQueueWorker};
use vbmq::worker::{QueueSettings, WaitMode};
use vhost_user_backend::VringT;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

const QUEUE_SIZE: u16 = 256;
const MEM_SIZE: usize = 1 << 24;
const BATCH: u16 = 32;
const RING: u64 = 0x1000;
const REQUESTS: u64 = 0x10_0000;
const REPLIES: u64 = 0x20_0000;
const DATA: u64 = 0x40_0000;
const FILE_BLOCKS: u64 = 1 << 16;
const BLOCK: u32 = 4096;

/// A directory on tmpfs holding `data`, removed on drop.
struct Share(PathBuf);

impl Share {
    fn new() -> Share {
        let dir = PathBuf::from(format!("/dev/shm/vbmq-fs-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut block = vec![0u8; 1 << 20];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let file = std::fs::File::create(dir.join("data")).unwrap();
        for chunk in 0..FILE_BLOCKS * u64::from(BLOCK) / block.len() as u64 {
            for word in block.chunks_exact_mut(8) {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                word.copy_from_slice(&x.to_ne_bytes());
            }
            std::os::unix::fs::FileExt::write_all_at(&file, &block, chunk << 20).unwrap();
        }
        Share(dir)
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A driver's side: the ring, and the requests it built in guest memory.
struct Guest {
    mem: GuestMemoryAtomic<GuestMemory>,
    vring: Vring,
    ring: SplitRing,
    unique: u64,
}

impl Guest {
    fn new() -> Guest {
        let mem = GuestMemory::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
        let ring = SplitRing::at(RING, QUEUE_SIZE);
        let mem = GuestMemoryAtomic::new(mem);
        let vring = Vring::new(mem.clone(), QUEUE_SIZE).unwrap();
        vring.set_queue_size(QUEUE_SIZE);
        vring
            .set_queue_info(ring.desc, ring.avail, ring.used)
            .unwrap();
        vring.set_queue_event_idx(true);
        vring.set_queue_ready(true);
        vring.set_enabled(true);
        Guest {
            mem,
            vring,
            ring,
            unique: 0,
        }
    }

    /// Writes request `slot` (header then `args`) as Linux's virtiofs driver frames it: one
    /// readable buffer, then the reply's header and its data in writable buffers of their own.
    fn frame(&mut self, slot: u16, opcode: Opcode, node: u64, args: &[u8], data: u32) {
        self.unique += 1;
        let header = InHeader {
            len: u32::try_from(size_of::<InHeader>() + args.len()).unwrap(),
            opcode: opcode as u32,
            unique: self.unique,
            nodeid: node,
            ..InHeader::default()
        };
        let at = REQUESTS + u64::from(slot) * 256;
        let mem = self.mem.memory();
        mem.write_slice(header.as_slice(), GuestAddress(at))
            .unwrap();
        mem.write_slice(args, GuestAddress(at + 40)).unwrap();
        let reply = REPLIES + u64::from(slot) * 256;
        let data_at = DATA + u64::from(slot) * u64::from(BLOCK);
        let buffers = [
            Buffer::readable(at, header.len),
            Buffer::writable(reply, 16),
            Buffer::writable(data_at, data),
        ];
        self.ring.write_chain(&*mem, slot * 3, &buffers);
    }

    /// One request in slot 0, served; returns the reply's body.
    fn call(
        &mut self,
        worker: &mut FsQueueWorker,
        opcode: Opcode,
        node: u64,
        args: &[u8],
    ) -> Vec<u8> {
        self.frame(0, opcode, node, args, BLOCK);
        self.ring.publish(&*self.mem.memory(), &[0]);
        worker.run(&self.vring, &AtomicBool::new(false));
        let mem = self.mem.memory();
        let used = self.ring.take_used(&*mem);
        assert_eq!(used.len(), 1);
        let out: OutHeader = mem.read_obj(GuestAddress(REPLIES)).unwrap();
        assert_eq!(out.error, 0, "{opcode:?} failed");
        let mut body = vec![0u8; BLOCK as usize];
        mem.read_slice(&mut body, GuestAddress(DATA)).unwrap();
        body
    }
}

/// The CPU time this thread spends running `f` `iters` times: the time others' work on a
/// shared machine takes from it is not counted.
fn on_cpu(iters: u64, mut f: impl FnMut()) -> Duration {
    let start = thread_cpu_time();
    for _ in 0..iters {
        f();
    }
    thread_cpu_time().saturating_sub(start)
}

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn fs_request_path(c: &mut Criterion) {
    let share = Share::new();
    let device = Arc::new(FsDevice::open(&share.0, "bench", 1, false).unwrap());
    let mut guest = Guest::new();
    let settings = QueueSettings::unpinned(WaitMode::Event, QUEUE_SIZE);
    let mut worker = FsQueue::worker(0, settings, device, guest.mem.clone(), Default::default());
    worker.set_up(&guest.vring, true);
    let init = InitIn {
        major: KERNEL_VERSION,
        minor: KERNEL_MINOR_VERSION,
        max_readahead: 1 << 20,
        flags: 0,
    };
    guest.call(&mut worker, Opcode::Init, 0, init.as_slice());
    let entry = guest.call(&mut worker, Opcode::Lookup, 1, b"data\0");
    let node = EntryOut::from_slice(&entry[..size_of::<EntryOut>()])
        .unwrap()
        .nodeid;
    let open = OpenIn::default();
    let opened = guest.call(&mut worker, Opcode::Open, node, open.as_slice());
    let fh = OpenOut::from_slice(&opened[..size_of::<OpenOut>()])
        .unwrap()
        .fh;

    let mut rng = 1u64;
    let batch = |guest: &mut Guest, worker: &mut FsQueueWorker, rng: &mut u64, n: u16| {
        let heads: Vec<u16> = (0..n).map(|slot| slot * 3).collect();
        for slot in 0..n {
            let read = ReadIn {
                fh,
                offset: next(rng) % FILE_BLOCKS * u64::from(BLOCK),
                size: BLOCK,
                ..ReadIn::default()
            };
            guest.frame(slot, Opcode::Read, node, read.as_slice(), BLOCK);
        }
        guest.ring.publish(&*guest.mem.memory(), &heads);
        worker.run(&guest.vring, &AtomicBool::new(false));
    };
    let mut group = c.benchmark_group("fs_request_path");
    group.throughput(Throughput::Elements(u64::from(BATCH)));
    group.bench_function("fs_read_4k_batch32", |b| {
        b.iter_custom(|iters| on_cpu(iters, || batch(&mut guest, &mut worker, &mut rng, BATCH)))
    });
    // One request a pass, as a client that resubmits each completion at once gives them.
    group.throughput(Throughput::Elements(1));
    group.bench_function("fs_read_4k_batch1", |b| {
        b.iter_custom(|iters| on_cpu(iters, || batch(&mut guest, &mut worker, &mut rng, 1)))
    });
    group.throughput(Throughput::Elements(u64::from(BATCH)));
    // The host's own: the same reads with `pread` into one buffer (the goal's reference).
    let file = std::fs::File::open(share.0.join("data")).unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    group.bench_function("host_pread_4k_x32", |b| {
        b.iter_custom(|iters| {
            on_cpu(iters, || {
                for _ in 0..BATCH {
                    let offset = next(&mut rng) % FILE_BLOCKS * u64::from(BLOCK);
                    std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, offset).unwrap();
                }
            })
        })
    });
    group.finish();
    // What was measured was served: one more batch, every READ answered with its 4 KiB.
    guest.ring.take_used(&*guest.mem.memory());
    batch(&mut guest, &mut worker, &mut rng, BATCH);
    let used = guest.ring.take_used(&*guest.mem.memory());
    assert_eq!(used.len(), usize::from(BATCH));
    assert!(used.iter().all(|&(_, len)| len == 16 + BLOCK), "{used:?}");
}

criterion_group!(benches, fs_request_path);
criterion_main!(benches);
