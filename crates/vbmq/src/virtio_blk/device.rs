//! What the guest is told about a disk, and what its requests are checked against.

use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::{GuestGate, WritesInFlight};
use crate::backend::{Disk, Geometry, WriterSeat};
use crate::limits::DiskLimiter;

/// Bytes in a virtio-blk sector, whatever the block size.
pub const SECTOR_SIZE: u64 = 512;
/// Data segments one request may carry (`seg_max`).
pub const SEG_MAX: u32 = 126;
/// Ranges one discard or write-zeroes request may carry: an engine operation each.
pub const DISCARD_SEG_MAX: u32 = crate::backend::OPS_PER_REQUEST_MAX;
/// Sectors one discard or write-zeroes range may cover (1 GiB).
pub const DISCARD_SECTORS_MAX: u32 = 1 << 21;

/// A disk as the guest sees it.
#[derive(Debug)]
pub struct BlkDevice {
    /// Block sizes, and the capacity when the disk was opened.
    pub geometry: Geometry,
    /// The capacity in bytes now (`resize` changes it under running queues).
    pub capacity: AtomicU64,
    /// I/O limits, shared by the disk's queues (`set-limits` changes them).
    pub limits: DiskLimiter,
    /// `VIRTIO_BLK_F_RO`.
    pub readonly: bool,
    /// `VIRTIO_BLK_F_DISCARD` and `VIRTIO_BLK_F_WRITE_ZEROES`.
    pub discard: bool,
    /// Number of virtqueues.
    pub num_queues: u16,
    /// The GET_ID answer, zero-padded.
    pub serial: [u8; VIRTIO_BLK_ID_BYTES as usize],
    /// Hands the image over with other `handover=on` disks, one writing at a time.
    pub writer_seat: OnceLock<Arc<WriterSeat>>,
    /// Writes in flight, for a shrinking resize to wait for.
    pub writes: WritesInFlight,
    /// Whether a guest has started, and what ends before it does.
    pub guest_gate: GuestGate,
}

impl BlkDevice {
    /// Makes writes wait for the image's write lock (`handover=on`).
    pub fn set_writer_seat(&self, seat: Option<Arc<WriterSeat>>) {
        if let Some(seat) = seat {
            let _ = self.writer_seat.set(seat);
        }
    }

    /// Whether a write may go to the image now: always, unless the image is handed over
    /// between disks and another holds its write lock.
    pub fn may_write(&self) -> bool {
        self.writer_seat.get().is_none_or(|seat| seat.may_write())
    }

    /// The frontend stopped the device: another disk of the image may write.
    pub fn stop_writing(&self) {
        if let Some(seat) = self.writer_seat.get() {
            seat.release();
        }
    }

    /// The device a guest sees for `disk`: discard is offered when the disk has it and the
    /// device is writable; `serial` is cut to 20 bytes.
    pub fn new(disk: &dyn Disk, readonly: bool, num_queues: u16, serial: &str) -> Self {
        let mut id = [0u8; VIRTIO_BLK_ID_BYTES as usize];
        let n = serial.len().min(id.len());
        id[..n].copy_from_slice(&serial.as_bytes()[..n]);
        let geometry = disk.geometry();
        BlkDevice {
            capacity: AtomicU64::new(geometry.capacity),
            limits: DiskLimiter::default(),
            geometry,
            readonly,
            discard: disk.supports_discard() && !readonly,
            num_queues,
            serial: id,
            writer_seat: OnceLock::new(),
            writes: WritesInFlight::new(usize::from(num_queues)),
            guest_gate: GuestGate::default(),
        }
    }

    /// The virtio feature bits offered.
    pub fn features(&self) -> u64 {
        let mut bits = [
            VIRTIO_F_VERSION_1,
            VIRTIO_RING_F_EVENT_IDX,
            VIRTIO_RING_F_INDIRECT_DESC,
            VIRTIO_BLK_F_SEG_MAX,
            VIRTIO_BLK_F_BLK_SIZE,
            VIRTIO_BLK_F_FLUSH,
            VIRTIO_BLK_F_TOPOLOGY,
            VIRTIO_BLK_F_MQ,
        ]
        .iter()
        .fold(0u64, |acc, bit| acc | 1 << bit);
        if self.readonly {
            bits |= 1 << VIRTIO_BLK_F_RO;
        }
        if self.discard {
            bits |= 1 << VIRTIO_BLK_F_DISCARD | 1 << VIRTIO_BLK_F_WRITE_ZEROES;
        }
        bits
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Capacity in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.capacity() / SECTOR_SIZE
    }

    /// The disk now has `bytes`: requests are checked against that from now on.
    pub fn set_capacity(&self, bytes: u64) {
        // Sequentially consistent, for a write's second check (see [`WritesInFlight`]).
        self.capacity.store(bytes, Ordering::SeqCst);
    }

    /// Whether a write ending at byte `end` still fits, checked after it was counted in
    /// [`Self::writes`]: a shrinking resize either waits for it or is seen here.
    pub fn write_fits(&self, end: u64) -> bool {
        end <= self.capacity.load(Ordering::SeqCst)
    }
}
