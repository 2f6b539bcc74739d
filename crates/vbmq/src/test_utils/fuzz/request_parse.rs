//! The request parser with an oracle: any chain a guest can build (raw flags and links, indirect
//! tables, headers, ranges, addresses near and past the ends of guest memory) goes through
//! `vbmq::virtio_blk::parse`, and whatever it accepts must be safe to execute:
//! data inside the disk and inside guest memory, in the right direction, within the limits, and a
//! status byte only in a device-writable descriptor. A crash here is a validation bug.
//! Legal layouts cut at any byte must be accepted, and found to be the same request.

use crate::backend::Geometry;
use crate::virtio_blk::{
    BlkDevice, DISCARD_SEG_MAX, Range, Request, RequestType, SECTOR_SIZE, SEG_MAX, parse,
};
use arbitrary::{Arbitrary, Unstructured};
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{RawDescriptor, split::Descriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

const QUEUE_SIZE: u16 = 64;
/// Buffers live in [BUFFERS, REGION0_END); region 1 follows a one-page gap.
const BUFFERS: u64 = 0x10_0000;
const REGION0_END: u64 = 0x20_0000;
const REGION1_START: u64 = REGION0_END + 0x1000;
const REGION1_END: u64 = 0x30_0000;

#[derive(Arbitrary, Debug)]
enum Addr {
    /// Slot `n` of the buffer area (4 KiB apart).
    Slot(u8),
    /// Just before the end of region 0 (straddles into the gap for lengths > n).
    EndOfRegion0(u16),
    Region1(u16),
    /// Before the end of guest memory.
    EndOfMemory(u16),
    Raw(u64),
}

impl Addr {
    fn gpa(&self) -> u64 {
        match *self {
            Addr::Slot(n) => BUFFERS + u64::from(n) * 0x1000,
            Addr::EndOfRegion0(n) => REGION0_END - u64::from(n),
            Addr::Region1(n) => REGION1_START + u64::from(n),
            Addr::EndOfMemory(n) => REGION1_END - u64::from(n),
            Addr::Raw(a) => a,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Len {
    Sectors(u8),
    Small(u8),
    Raw(u32),
}

impl Len {
    fn bytes(&self) -> u32 {
        match *self {
            Len::Sectors(n) => u32::from(n) * 512,
            Len::Small(n) => u32::from(n),
            Len::Raw(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Desc {
    addr: Addr,
    len: Len,
    write: bool,
    /// None: link to the next descriptor (or end the chain if last).
    next: Option<u16>,
    indirect: bool,
}

#[derive(Arbitrary, Debug)]
enum Sector {
    Small(u16),
    NearEnd(u8),
    Raw(u64),
}

#[derive(Arbitrary, Debug)]
struct Input {
    readonly: bool,
    discard: bool,
    /// Capacity in 4 KiB units (0 is a zero-sized disk).
    capacity_pages: u8,
    kind: u32,
    sector: Sector,
    /// Written into buffer slot 0 and 1 as discard/write-zeroes ranges.
    ranges: Vec<(u64, u32, u32)>,
    descs: Vec<Desc>,
    /// An indirect table written at slot 200 from these.
    table: Vec<Desc>,
}

/// A descriptor of the chain as the parser could have seen it (queue table or indirect table).
fn all_descs(input: &Input) -> impl Iterator<Item = &Desc> {
    input.descs.iter().chain(&input.table)
}

fn raw(d: &Desc, index: usize, count: usize) -> RawDescriptor {
    let mut flags = 0u16;
    if d.write {
        flags |= VRING_DESC_F_WRITE as u16;
    }
    if d.indirect {
        flags |= VRING_DESC_F_INDIRECT as u16;
    }
    let next = match d.next {
        Some(n) => {
            flags |= VRING_DESC_F_NEXT as u16;
            n
        }
        None if index + 1 < count => {
            flags |= VRING_DESC_F_NEXT as u16;
            index as u16 + 1
        }
        None => 0,
    };
    RawDescriptor::from(Descriptor::new(desc_addr(d), d.len.bytes(), flags, next))
}

/// Where the indirect table is written; every indirect descriptor points at it, so the oracle
/// knows every descriptor the parser can see.
const TABLE: u64 = BUFFERS + 200 * 0x1000;

fn desc_addr(d: &Desc) -> u64 {
    if d.indirect { TABLE } else { d.addr.gpa() }
}

/// Whether host range `[ptr, ptr + len)` lies inside a region's mapping.
fn host_range_mapped(mem: &GuestMemoryMmap, ptr: usize, len: usize) -> bool {
    mem.iter().any(|region| {
        let Ok(base) = mem.get_host_address(region.start_addr()) else {
            return false;
        };
        let base = base as usize;
        ptr >= base && ptr + len <= base + region.len() as usize
    })
}

/// One input: a chain through the parser, whose every accepted request is checked.
/// The same bytes also make a legal request cut at arbitrary bytes (see `split_layout`).
pub fn request_parse(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        check(&input);
    }
    super::split_layout::split_layout(data);
}

fn check(input: &Input) {
    if input.descs.is_empty() || input.descs.len() > 48 || input.table.len() > 200 {
        return;
    }
    let mem = GuestMemoryMmap::<()>::from_ranges(&[
        (GuestAddress(0), REGION0_END as usize),
        (
            GuestAddress(REGION1_START),
            (REGION1_END - REGION1_START) as usize,
        ),
    ])
    .unwrap();
    let capacity = u64::from(input.capacity_pages) * 4096;
    let sectors = capacity / SECTOR_SIZE;
    let sector = match input.sector {
        Sector::Small(s) => u64::from(s),
        Sector::NearEnd(d) => sectors.wrapping_sub(u64::from(d)),
        Sector::Raw(s) => s,
    };
    // The header goes wherever the first descriptor points (if that is memory).
    let mut hdr = [0u8; 16];
    hdr[0..4].copy_from_slice(&input.kind.to_le_bytes());
    hdr[8..16].copy_from_slice(&sector.to_le_bytes());
    // (Not into the rings below BUFFERS nor the indirect table area from TABLE: that would forge
    // descriptors the oracle does not know about.)
    let header_at = desc_addr(&input.descs[0]);
    if (BUFFERS..TABLE).contains(&header_at) {
        let _ = mem.write_slice(&hdr, GuestAddress(header_at));
    }
    for (i, &(s, n, f)) in input.ranges.iter().take(64).enumerate() {
        let mut r = [0u8; 16];
        r[0..8].copy_from_slice(&s.to_le_bytes());
        r[8..12].copy_from_slice(&n.to_le_bytes());
        r[12..16].copy_from_slice(&f.to_le_bytes());
        let _ = mem.write_slice(&r, GuestAddress(BUFFERS + 0x1000 + 16 * i as u64));
    }
    for (i, d) in input.table.iter().enumerate() {
        let _ = mem.write_obj(
            raw(d, i, input.table.len()),
            GuestAddress(TABLE + 16 * i as u64),
        );
    }
    let descs: Vec<RawDescriptor> = input
        .descs
        .iter()
        .enumerate()
        .map(|(i, d)| raw(d, i, input.descs.len()))
        .collect();
    let queue = MockSplitQueue::new(&mem, QUEUE_SIZE);
    let Ok(chain) = queue.build_multiple_desc_chains(&descs) else {
        return;
    };
    let device = BlkDevice {
        limits: Default::default(),
        capacity: std::sync::atomic::AtomicU64::new(capacity),
        geometry: Geometry {
            capacity,
            block_size: 512,
            physical_block_exp: 0,
        },
        readonly: input.readonly,
        discard: input.discard,
        num_queues: 1,
        serial: [0; 20],
        writer_seat: Default::default(),
        writes: crate::virtio_blk::WritesInFlight::new(1),
        guest_gate: Default::default(),
    };
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = vec![empty; SEG_MAX as usize];
    let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];

    // A status byte may only go inside a device-writable descriptor, inside guest memory.
    let in_writable = |addr: GuestAddress| {
        all_descs(input).any(|d| {
            let start = desc_addr(d);
            d.write && addr.0 >= start && addr.0 - start < u64::from(d.len.bytes())
        }) && mem.get_slice(addr, 1).is_ok()
    };
    match parse(chain, &mem, &device, &mut iov, &mut ranges) {
        Err(rejection) => {
            if let Some(status) = rejection.status {
                assert!(
                    in_writable(status),
                    "status at {status:?} for {rejection:?}"
                );
            }
        }
        Ok(req) => {
            assert!(
                in_writable(req.status),
                "status at {:?} for {req:?}",
                req.status
            );
            let writes = matches!(
                req.kind(),
                RequestType::Out | RequestType::Discard | RequestType::WriteZeroes
            );
            assert!(
                !(input.readonly && writes),
                "write accepted on a read-only disk: {req:?}"
            );
            match req.kind() {
                RequestType::In | RequestType::Out => {
                    let len = u64::from(req.data_len());
                    assert_eq!(len % SECTOR_SIZE, 0, "{req:?}");
                    assert_eq!(req.offset() % SECTOR_SIZE, 0, "{req:?}");
                    assert!(
                        req.offset()
                            .checked_add(len)
                            .is_some_and(|end| end <= capacity),
                        "{req:?}"
                    );
                    check_iovecs(input, &mem, &iov, &req);
                }
                RequestType::Discard | RequestType::WriteZeroes => {
                    assert!(input.discard, "{req:?} on a disk without discard");
                    assert!(
                        (1..=DISCARD_SEG_MAX).contains(&req.range_count()),
                        "{req:?}"
                    );
                    for r in &ranges[..req.range_count() as usize] {
                        assert!(
                            r.offset
                                .checked_add(r.len)
                                .is_some_and(|end| end <= capacity),
                            "{r:?}"
                        );
                        assert!(!(r.unmap && req.kind() == RequestType::Discard), "{r:?}");
                    }
                }
                RequestType::GetId => check_iovecs(input, &mem, &iov, &req),
                RequestType::Flush => {}
            }
        }
    }
}

/// The guest address of host pointer `ptr`, if it lies in a region's mapping.
fn guest_address(mem: &GuestMemoryMmap, ptr: usize) -> Option<u64> {
    mem.iter().find_map(|region| {
        let base = mem.get_host_address(region.start_addr()).ok()? as usize;
        (ptr >= base && ptr < base + region.len() as usize)
            .then(|| region.start_addr().0 + (ptr - base) as u64)
    })
}

/// The iovecs of an accepted IN, OUT or GET_ID: within the limit, adding up to the data length,
/// each inside guest memory and inside one descriptor of the direction the request needs (the
/// device writes only into device-writable buffers, and reads OUT data only from readable ones).
fn check_iovecs(input: &Input, mem: &GuestMemoryMmap, iov: &[libc::iovec], req: &Request) {
    assert!(req.iov_count() <= SEG_MAX, "{req:?}");
    let used = &iov[..req.iov_count() as usize];
    let total: u64 = used.iter().map(|v| v.iov_len as u64).sum();
    assert_eq!(
        total,
        u64::from(req.data_len()),
        "iovecs do not add up to the data length: {req:?}"
    );
    let device_writes = req.kind() != RequestType::Out;
    for v in used {
        assert!(
            host_range_mapped(mem, v.iov_base as usize, v.iov_len),
            "iovec outside guest memory: {req:?}"
        );
        let gpa = guest_address(mem, v.iov_base as usize).unwrap_or(u64::MAX);
        let inside = all_descs(input).any(|d| {
            let start = desc_addr(d);
            d.write == device_writes
                && gpa >= start
                && gpa - start + v.iov_len as u64 <= u64::from(d.len.bytes())
        });
        assert!(inside, "iovec outside a buffer of its direction: {req:?}");
    }
}
