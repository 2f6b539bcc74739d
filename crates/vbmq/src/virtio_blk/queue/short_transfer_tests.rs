//! Reads and writes that the storage carries out in pieces (as NFS, FUSE or a file that shrank
//! do): the worker asks again for the rest until it is done, and fails a request only when a
//! piece moves nothing. The engine here is a test engine: it really copies between guest memory
//! and its disk bytes, but at most `piece` bytes per operation.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};

use crate::guest::GuestMemory;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

use crate::backend::immediate::{Execute, Immediate};
use crate::backend::{Disk, Engine, EngineOptions, Geometry, IoOp};
use crate::virtio_blk::BlkDevice;
use vbmq_driver::{Buffer, SplitRing, blk_header};

use super::tests::{AVAIL, DESC, SIZE, USED, event_worker, started_vring};

const CAPACITY: u64 = 1 << 20;
const STATUS: u64 = 0x8010;

/// A disk in host memory whose engine moves at most `piece` bytes per operation and nothing
/// at or past `end` (a file that shrank to `end` bytes).
struct PiecewiseDisk {
    bytes: Arc<Mutex<Vec<u8>>>,
    piece: usize,
    end: usize,
    /// Results come back at the reap after the one following their push, as from a ring.
    deferred: bool,
}

struct PiecewiseEngine {
    bytes: Arc<Mutex<Vec<u8>>>,
    piece: usize,
    end: usize,
    deferred: bool,
    waiting: Vec<(u64, i32)>,
    done: Vec<(u64, i32)>,
    /// Operations pushed, to show the request went in pieces.
    pushes: Arc<Mutex<usize>>,
}

impl Disk for PiecewiseDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: CAPACITY,
            block_size: 512,
            physical_block_exp: 0,
        }
    }

    fn engine(&self, _: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(PiecewiseEngine {
            bytes: self.bytes.clone(),
            piece: self.piece,
            end: self.end,
            deferred: self.deferred,
            waiting: Vec::new(),
            done: Vec::new(),
            pushes: PUSHES.with(|p| p.clone()),
        }))
    }

    fn supports_discard(&self) -> bool {
        false
    }
}

thread_local! {
    static PUSHES: Arc<Mutex<usize>> = Arc::new(Mutex::new(0));
}

impl Engine for PiecewiseEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        *self.pushes.lock().unwrap() += 1;
        let mut bytes = self.bytes.lock().unwrap();
        let result = match op {
            IoOp::Read { offset, iov } | IoOp::Write { offset, iov } => {
                let at = offset as usize;
                let n = iov.len().min(self.piece).min(self.end.saturating_sub(at));
                let disk = bytes[at..at + n].as_mut_ptr();
                // SAFETY: `disk` has `n` bytes, separate from the guest buffers of `iov`.
                unsafe {
                    if matches!(op, IoOp::Read { .. }) {
                        iov.copy_in(0, disk, n);
                    } else {
                        iov.copy_out(0, disk, n);
                    }
                }
                i32::try_from(n).unwrap()
            }
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => 0,
        };
        if self.deferred {
            self.waiting.push((tag, result));
        } else {
            self.done.push((tag, result));
        }
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn wait(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for (tag, result) in self.done.drain(..) {
            done(tag, result);
        }
        self.done.append(&mut self.waiting);
    }

    fn completion_fd(&self) -> Option<RawFd> {
        None
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 509) as u8).collect()
}

/// Serves the one request published on the ring in `mem` with a worker over `disk`, in
/// event-mode passes (each one as after one wake-up) until it is used; returns the memory.
fn serve_one(mem: GuestMemory, disk: Arc<dyn Disk>) -> GuestMemoryAtomic<GuestMemory> {
    let atomic = GuestMemoryAtomic::new(mem);
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
    let mut worker = event_worker(device, disk, &atomic);
    let vring = started_vring(&atomic, &mut worker);
    let stop = std::sync::atomic::AtomicBool::new(false);
    for _ in 0..64 {
        worker.run(&vring, &stop);
        let used = atomic.memory().read_obj::<u16>(GuestAddress(USED + 2));
        if used.unwrap() == 1 {
            break;
        }
    }
    atomic
}

/// Runs one request (`kind` at `sector`, data into/from two buffers of 1536 and 2560 bytes) on
/// a worker over `disk`; returns the status byte, the guest data and the operations pushed.
fn one_request(disk: PiecewiseDisk, kind: u32, sector: u64, data: &[u8]) -> (u8, Vec<u8>, usize) {
    PUSHES.with(|p| *p.lock().unwrap() = 0);
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap();
    mem.write_slice(&blk_header(kind, sector), GuestAddress(0x8000))
        .unwrap();
    mem.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
    mem.write_slice(data, GuestAddress(0x10000)).unwrap();
    let write = kind == VIRTIO_BLK_T_OUT;
    let data_buf = |addr, len| {
        if write {
            Buffer::readable(addr, len)
        } else {
            Buffer::writable(addr, len)
        }
    };
    let mut ring = SplitRing::new(SIZE, DESC, AVAIL, USED);
    let buffers = [
        Buffer::readable(0x8000, 16),
        data_buf(0x10000, 1536),
        data_buf(0x10000 + 1536, 2560),
        Buffer::writable(STATUS, 1),
    ];
    let head = ring.write_chain(&mem, 0, &buffers);
    ring.publish(&mem, &[head]);
    let atomic = serve_one(mem, Arc::new(disk));
    let mem = atomic.memory();
    assert_eq!(
        mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(),
        1,
        "not completed"
    );
    let mut got = vec![0u8; 4096];
    mem.read_slice(&mut got, GuestAddress(0x10000)).unwrap();
    let status = mem.read_obj::<u8>(GuestAddress(STATUS)).unwrap();
    (status, got, PUSHES.with(|p| *p.lock().unwrap()))
}

fn piecewise(piece: usize, end: usize, deferred: bool) -> (PiecewiseDisk, Arc<Mutex<Vec<u8>>>) {
    let bytes = Arc::new(Mutex::new(pattern(CAPACITY as usize)));
    let disk = PiecewiseDisk {
        bytes: bytes.clone(),
        piece,
        end,
        deferred,
    };
    (disk, bytes)
}

#[test]
fn a_read_done_in_pieces_completes_with_every_byte() {
    for deferred in [false, true] {
        // 1000 bytes a time: pieces end inside sectors and inside iovecs.
        let (disk, bytes) = piecewise(1000, CAPACITY as usize, deferred);
        let (status, got, pushes) = one_request(disk, VIRTIO_BLK_T_IN, 3, &[0u8; 4096]);
        assert_eq!(status, 0, "deferred: {deferred}");
        assert_eq!(pushes, 5, "deferred: {deferred}");
        assert!(
            got == bytes.lock().unwrap()[3 * 512..3 * 512 + 4096],
            "deferred: {deferred}"
        );
    }
}

#[test]
fn a_write_done_in_pieces_completes_with_every_byte() {
    for deferred in [false, true] {
        let (disk, bytes) = piecewise(700, CAPACITY as usize, deferred);
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8 ^ 0x5a).collect();
        let (status, _, pushes) = one_request(disk, VIRTIO_BLK_T_OUT, 8, &data);
        assert_eq!(status, 0, "deferred: {deferred}");
        assert_eq!(pushes, 6, "deferred: {deferred}");
        assert!(bytes.lock().unwrap()[8 * 512..8 * 512 + 4096] == data[..]);
    }
}

#[test]
fn a_read_that_stops_moving_bytes_is_an_error() {
    // The file ends 1000 bytes into the request: the first piece moves bytes, the next none.
    let (disk, _) = piecewise(1 << 20, 3 * 512 + 1000, false);
    let (status, _, pushes) = one_request(disk, VIRTIO_BLK_T_IN, 3, &[0u8; 4096]);
    assert_eq!((status, pushes), (1, 2));
    // Entirely past the end: no progress at all.
    let (disk, _) = piecewise(1 << 20, 512, true);
    let (status, _, pushes) = one_request(disk, VIRTIO_BLK_T_IN, 3, &[0u8; 4096]);
    assert_eq!((status, pushes), (1, 1));
}

/// A disk of 4 GiB whose engine moves what the kernel moves in one read or write at most
/// (`MAX_RW_COUNT`, 2 GiB less a page) and touches no memory: a request longer than an `i32`
/// result can say comes back short and is finished by asking again.
struct KernelSizedDisk;

/// What the kernel moves of a read or write at once; no memory touched.
struct KernelSized;

/// Linux's `MAX_RW_COUNT` with 4 KiB pages.
const MAX_RW_COUNT: usize = 0x7fff_f000;

impl Disk for KernelSizedDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: 4 << 30,
            block_size: 512,
            physical_block_exp: 0,
        }
    }

    fn engine(&self, _: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(Immediate::new(KernelSized, 16)))
    }

    fn supports_discard(&self) -> bool {
        false
    }
}

impl Execute for KernelSized {
    fn execute(&mut self, op: IoOp) -> i32 {
        let result = match op {
            IoOp::Read { iov, .. } | IoOp::Write { iov, .. } => iov.len().min(MAX_RW_COUNT),
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => 0,
        };
        i32::try_from(result).unwrap_or(i32::MAX)
    }
}

#[test]
fn a_read_of_more_than_two_gibibytes_completes() {
    const DATA: u64 = 1 << 20;
    const LEN: u32 = (3 << 30) - 4096;
    // Untouched guest memory costs nothing: the engine never writes it.
    let size = usize::try_from(DATA + u64::from(LEN)).unwrap();
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), size)]).unwrap();
    mem.write_slice(&blk_header(VIRTIO_BLK_T_IN, 0), GuestAddress(0x8000))
        .unwrap();
    mem.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
    let mut ring = SplitRing::new(SIZE, DESC, AVAIL, USED);
    let buffers = [
        Buffer::readable(0x8000, 16),
        Buffer::writable(DATA, LEN),
        Buffer::writable(STATUS, 1),
    ];
    let head = ring.write_chain(&mem, 0, &buffers);
    ring.publish(&mem, &[head]);
    let atomic = serve_one(mem, Arc::new(KernelSizedDisk));
    let mem = atomic.memory();
    assert_eq!(mem.read_obj::<u16>(GuestAddress(USED + 2)).unwrap(), 1);
    assert_eq!(
        mem.read_obj::<u8>(GuestAddress(STATUS)).unwrap(),
        0,
        "IOERR"
    );
    // The used length: every byte read, and the status.
    assert_eq!(
        mem.read_obj::<u32>(GuestAddress(USED + 4 + 4)).unwrap(),
        LEN + 1
    );
}
