//! A driver's side of a split virtqueue in guest memory. The driver owns that memory: a ring
//! placed outside it is a bug of the caller and panics.

use std::sync::atomic::{Ordering, fence};

use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;
use vm_memory::{Bytes, GuestAddress, GuestMemory};

/// One buffer of a chain: where it is, how long, and whether the device writes it.
#[derive(Clone, Copy, Debug)]
pub struct Buffer {
    /// Guest physical address.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// Device-writable (`VRING_DESC_F_WRITE`).
    pub device_writes: bool,
}

impl Buffer {
    /// A buffer the device reads.
    pub fn readable(addr: u64, len: u32) -> Self {
        Buffer {
            addr,
            len,
            device_writes: false,
        }
    }

    /// A buffer the device writes.
    pub fn writable(addr: u64, len: u32) -> Self {
        Buffer {
            addr,
            len,
            device_writes: true,
        }
    }
}

/// A split virtqueue's three areas, and the driver's next avail index.
#[derive(Clone, Debug)]
pub struct SplitRing {
    /// Queue size.
    pub size: u16,
    /// The descriptor table.
    pub desc: u64,
    /// The avail ring.
    pub avail: u64,
    /// The used ring.
    pub used: u64,
    avail_idx: u16,
    used_seen: u16,
}

impl SplitRing {
    /// A ring of `size` entries at the given addresses.
    pub fn new(size: u16, desc: u64, avail: u64, used: u64) -> Self {
        SplitRing {
            size,
            desc,
            avail,
            used,
            avail_idx: 0,
            used_seen: 0,
        }
    }

    /// A ring of `size` entries laid out from `base` as tightly as the spec allows: table,
    /// avail ring (flags, idx, ring, used_event), then the used ring aligned to 4.
    pub fn at(base: u64, size: u16) -> Self {
        let avail = base + 16 * u64::from(size);
        let used = (avail + 6 + 2 * u64::from(size)).next_multiple_of(4);
        SplitRing::new(size, base, avail, used)
    }

    /// Bytes of guest memory the ring occupies from `desc`.
    pub fn span(&self) -> u64 {
        self.used + 6 + 8 * u64::from(self.size) - self.desc
    }

    /// Writes descriptor `index` of the table at `table` (the queue's own or an indirect one).
    pub fn write_desc<M: GuestMemory>(&self, mem: &M, table: u64, index: u32, desc: Descriptor) {
        let at = GuestAddress(table + 16 * u64::from(index));
        mem.write_obj(desc, at)
            .expect("descriptor outside guest memory");
    }

    /// Writes `buffers` as one chain in the queue's table from descriptor `first` on, each
    /// linked to the next slot; returns its head.
    pub fn write_chain<M: GuestMemory>(&self, mem: &M, first: u16, buffers: &[Buffer]) -> u16 {
        for (i, buffer) in buffers.iter().enumerate() {
            let index = first.wrapping_add(i as u16) % self.size;
            let last = i + 1 == buffers.len();
            let mut flags = if buffer.device_writes {
                VRING_DESC_F_WRITE as u16
            } else {
                0
            };
            let next = if last {
                0
            } else {
                flags |= VRING_DESC_F_NEXT as u16;
                index.wrapping_add(1) % self.size
            };
            let desc = Descriptor::new(buffer.addr, buffer.len, flags, next);
            self.write_desc(mem, self.desc, u32::from(index), desc);
        }
        first % self.size
    }

    /// Places `heads` on the avail ring and publishes the new index, as a driver does.
    pub fn publish<M: GuestMemory>(&mut self, mem: &M, heads: &[u16]) {
        let mut idx = self.avail_idx;
        for &head in heads {
            let slot = u64::from(idx % self.size);
            self.store(mem, self.avail + 4 + 2 * slot, head);
            idx = idx.wrapping_add(1);
        }
        fence(Ordering::SeqCst);
        self.publish_avail_idx(mem, idx);
    }

    /// Publishes any avail index, even one a well-behaved driver never would.
    pub fn publish_avail_idx<M: GuestMemory>(&mut self, mem: &M, idx: u16) {
        self.store(mem, self.avail + 2, idx);
        self.avail_idx = idx;
    }

    /// The driver's avail index.
    pub fn avail_idx(&self) -> u16 {
        self.avail_idx
    }

    /// The used index up to which [`SplitRing::take_used`] has consumed.
    pub fn used_seen(&self) -> u16 {
        self.used_seen
    }

    /// The device's used index.
    pub fn used_idx<M: GuestMemory>(&self, mem: &M) -> u16 {
        mem.load(GuestAddress(self.used + 2), Ordering::Acquire)
            .expect("used ring outside guest memory")
    }

    /// The used entries (`id`, `len`) published since the last call.
    pub fn take_used<M: GuestMemory>(&mut self, mem: &M) -> Vec<(u32, u32)> {
        let now = self.used_idx(mem);
        let mut out = Vec::new();
        while self.used_seen != now {
            let at = self.used + 4 + 8 * u64::from(self.used_seen % self.size);
            let id: u32 = mem.read_obj(GuestAddress(at)).expect("used ring");
            let len: u32 = mem.read_obj(GuestAddress(at + 4)).expect("used ring");
            out.push((u32::from_le(id), u32::from_le(len)));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }

    fn store<M: GuestMemory>(&self, mem: &M, gpa: u64, value: u16) {
        mem.store(value.to_le(), GuestAddress(gpa), Ordering::Release)
            .expect("avail ring outside guest memory");
    }
}
