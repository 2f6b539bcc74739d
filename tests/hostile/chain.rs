//! Building requests in guest memory: headers, data buffers, status bytes and the descriptor
//! chains that tie them together, valid or not.

use virtio_bindings::virtio_blk::{virtio_blk_discard_write_zeroes, virtio_blk_outhdr};
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::split::Descriptor;

use super::frontend::{Guest, SCRATCH_START};
use super::memory::{GuestRam, REGION0_SIZE};

pub const NEXT: u16 = VRING_DESC_F_NEXT as u16;
pub const WRITE: u16 = VRING_DESC_F_WRITE as u16;
pub const INDIRECT: u16 = VRING_DESC_F_INDIRECT as u16;

/// One buffer of a chain, before it is linked.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    pub addr: u64,
    pub len: u32,
    pub flags: u16,
}

impl Seg {
    pub fn r(addr: u64, len: u32) -> Self {
        Seg {
            addr,
            len,
            flags: 0,
        }
    }
    pub fn w(addr: u64, len: u32) -> Self {
        Seg {
            addr,
            len,
            flags: WRITE,
        }
    }
}

/// Per-case guest state: a bump allocator over scratch memory, the next free queue descriptor,
/// the heads to publish and the guest ranges the device may write.
pub struct Ctx<'a> {
    pub g: &'a mut Guest,
    next_gpa: u64,
    pub next_desc: u16,
    pub heads: Vec<u16>,
    pub writable: Vec<(u64, u64)>,
    /// Replace the avail index instead of publishing `heads` normally.
    pub avail_idx_override: Option<u16>,
}

impl<'a> Ctx<'a> {
    pub fn new(g: &'a mut Guest) -> Self {
        Self::at(g, SCRATCH_START, 0)
    }

    /// A context allocating from `gpa` and queue descriptor `desc` on.
    pub fn at(g: &'a mut Guest, gpa: u64, desc: u16) -> Self {
        Ctx {
            g,
            next_gpa: gpa,
            next_desc: desc,
            heads: Vec::new(),
            writable: Vec::new(),
            avail_idx_override: None,
        }
    }

    pub fn ram(&self) -> &GuestRam {
        &self.g.ram
    }

    pub fn alloc(&mut self, len: u64, align: u64) -> u64 {
        let addr = self.next_gpa.next_multiple_of(align);
        self.next_gpa = addr + len;
        assert!(self.next_gpa <= REGION0_SIZE, "scratch memory exhausted");
        addr
    }

    pub fn header(&mut self, type_: u32, sector: u64) -> u64 {
        let hdr = virtio_blk_outhdr {
            type_: type_.to_le(),
            ioprio: 0,
            sector: sector.to_le(),
        };
        let addr = self.alloc(16, 16);
        let mut bytes = Vec::with_capacity(16);
        bytes.extend_from_slice(&{ hdr.type_ }.to_ne_bytes());
        bytes.extend_from_slice(&{ hdr.ioprio }.to_ne_bytes());
        bytes.extend_from_slice(&{ hdr.sector }.to_ne_bytes());
        self.g.ram.write(addr, &bytes);
        addr
    }

    /// Discard / write-zeroes ranges, each `(sector, num_sectors, flags)`.
    pub fn ranges(&mut self, ranges: &[(u64, u32, u32)]) -> u64 {
        let addr = self.alloc(16 * ranges.len().max(1) as u64, 16);
        for (i, &(sector, num, flags)) in ranges.iter().enumerate() {
            let r = virtio_blk_discard_write_zeroes {
                sector: sector.to_le(),
                num_sectors: num.to_le(),
                flags: flags.to_le(),
            };
            let mut bytes = Vec::with_capacity(16);
            bytes.extend_from_slice(&{ r.sector }.to_ne_bytes());
            bytes.extend_from_slice(&{ r.num_sectors }.to_ne_bytes());
            bytes.extend_from_slice(&{ r.flags }.to_ne_bytes());
            self.g.ram.write(addr + 16 * i as u64, &bytes);
        }
        addr
    }

    /// A data buffer filled with `fill`-derived bytes (for OUT) or left poisoned (for IN).
    pub fn buffer(&mut self, len: u64, fill: Option<u8>) -> u64 {
        let addr = self.alloc(len.max(1), 512);
        if let Some(seed) = fill {
            let bytes: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(13) ^ seed ^ (i >> 9) as u8)
                .collect();
            self.g.ram.write(addr, &bytes);
        }
        addr
    }

    /// A one-byte status location (left poisoned, so a missing write shows).
    pub fn status(&mut self) -> u64 {
        self.alloc(1, 1)
    }

    fn note_writable(&mut self, seg: &Seg) {
        if seg.flags & WRITE != 0 {
            self.writable.push((seg.addr, u64::from(seg.len)));
        }
    }

    /// Links `segs` through consecutive queue descriptors; returns the head.
    pub fn direct(&mut self, segs: &[Seg]) -> u16 {
        let head = self.next_desc;
        for (i, seg) in segs.iter().enumerate() {
            let index = head.wrapping_add(i as u16) % self.g.queue_size;
            let last = i + 1 == segs.len();
            let flags = if last { seg.flags } else { seg.flags | NEXT };
            let next = (index + 1) % self.g.queue_size;
            self.g.write_desc(
                super::frontend::RING_BASE,
                u32::from(index),
                Descriptor::new(seg.addr, seg.len, flags, next),
            );
            self.note_writable(seg);
        }
        self.next_desc = head.wrapping_add(segs.len() as u16) % self.g.queue_size;
        head
    }

    /// Writes `segs` as an indirect table; returns the table's address.
    pub fn table(&mut self, segs: &[Seg]) -> u64 {
        let table = self.alloc(16 * segs.len().max(1) as u64, 16);
        for (i, seg) in segs.iter().enumerate() {
            let last = i + 1 == segs.len();
            let flags = if last { seg.flags } else { seg.flags | NEXT };
            self.g.write_desc(
                table,
                i as u32,
                Descriptor::new(seg.addr, seg.len, flags, i as u16 + 1),
            );
            self.note_writable(seg);
        }
        table
    }

    /// One queue descriptor pointing at an indirect table holding `segs`; returns the head.
    pub fn indirect(&mut self, segs: &[Seg]) -> u16 {
        let table = self.table(segs);
        self.raw_head(Descriptor::new(table, 16 * segs.len() as u32, INDIRECT, 0))
    }

    /// A single queue descriptor, written as given.
    pub fn raw_head(&mut self, desc: Descriptor) -> u16 {
        let head = self.next_desc;
        self.g
            .write_desc(super::frontend::RING_BASE, u32::from(head), desc);
        self.next_desc = (head + 1) % self.g.queue_size;
        head
    }

    /// Writes a descriptor at a chosen queue index (for loops and bad links).
    pub fn desc_at(&mut self, index: u16, desc: Descriptor) {
        if desc.flags() & WRITE != 0 {
            self.writable.push((desc.addr().0, u64::from(desc.len())));
        }
        self.g
            .write_desc(super::frontend::RING_BASE, u32::from(index), desc);
    }

    pub fn submit(&mut self, head: u16) {
        self.heads.push(head);
    }
}
