//! A guest's requests, as a queue worker sees them: descriptor tables, indirect tables, headers
//! and avail entries written into two guest memory regions, then served by the real worker over
//! a memory disk. Structure-aware: most chains are well formed, some are broken on purpose.
//! Whatever the input, the worker must not panic, must not hang, and must return only heads
//! that exist.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::backend::{Disk, MemoryDisk};
use crate::guest::{GuestMemory, Vring};
use crate::virtio_blk::BlkDevice;
use crate::virtio_blk::queue::BlkQueue;
use crate::worker::QueueSettings;
use crate::worker::WaitMode;
use arbitrary::{Arbitrary, Unstructured};
use vhost_user_backend::VringT;
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

const QUEUE_SIZE: u16 = 16;
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;
/// Indirect tables live here, 16 descriptors apart.
const INDIRECT: u64 = 0x4000;
/// Headers and status bytes.
const HEADERS: u64 = 0x8000;
/// Region 0 is [0, 1 MiB); region 1 is [1 MiB + 4 KiB, 2 MiB): a gap and a boundary to cross.
const REGION0_END: u64 = 1 << 20;
const REGION1_START: u64 = REGION0_END + 0x1000;
const REGION1_END: u64 = 2 << 20;
const CAPACITY: u64 = 1 << 20;

#[derive(Arbitrary, Debug)]
enum Kind {
    In,
    Out,
    Flush,
    GetId,
    Discard,
    WriteZeroes,
    Other(u32),
}

impl Kind {
    fn code(&self) -> u32 {
        match self {
            Kind::In => 0,
            Kind::Out => 1,
            Kind::Flush => 4,
            Kind::GetId => 8,
            Kind::Discard => 11,
            Kind::WriteZeroes => 13,
            Kind::Other(code) => *code,
        }
    }

    fn device_writes(&self) -> bool {
        matches!(self, Kind::In | Kind::GetId)
    }
}

/// Where a buffer points: mostly inside region 0, sometimes anywhere.
#[derive(Arbitrary, Debug)]
enum Place {
    Data(u16),
    Anywhere(u64),
    Region1(u16),
    Boundary,
}

impl Place {
    fn addr(&self) -> u64 {
        match self {
            Place::Data(page) => 0x1_0000 + u64::from(*page % 200) * 4096,
            Place::Anywhere(addr) => *addr,
            Place::Region1(page) => REGION1_START + u64::from(*page % 200) * 4096,
            Place::Boundary => REGION0_END - 512,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Segment {
    place: Place,
    sectors: u8,
    /// Flip the segment's direction.
    wrong_way: bool,
}

#[derive(Arbitrary, Debug)]
struct DiscardRange {
    sector: u32,
    sectors: u32,
    flags: u8,
}

/// One descriptor written verbatim: for the broken chains.
#[derive(Arbitrary, Debug)]
struct RawDesc {
    addr: u64,
    len: u32,
    flags: u16,
    next: u16,
}

#[derive(Arbitrary, Debug)]
enum Chain {
    WellFormed {
        kind: Kind,
        sector: u64,
        segments: Vec<Segment>,
        ranges: Vec<DiscardRange>,
        indirect: bool,
        header_len: u8,
        status_len: u8,
    },
    Raw(Vec<RawDesc>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    chains: Vec<Chain>,
    /// Extra avail entries with arbitrary heads (reused, out of range).
    stray_heads: Vec<u16>,
    readonly: bool,
}

fn desc_bytes(addr: u64, len: u32, flags: u16, next: u16) -> [u8; 16] {
    let mut raw = [0u8; 16];
    raw[0..8].copy_from_slice(&addr.to_le_bytes());
    raw[8..12].copy_from_slice(&len.to_le_bytes());
    raw[12..14].copy_from_slice(&flags.to_le_bytes());
    raw[14..16].copy_from_slice(&next.to_le_bytes());
    raw
}

/// Writes `chain` at descriptor `head` (using slots `head..` of a table at `table`), returning
/// the descriptors it used.
fn write_chain(mem: &GuestMemory, chain: &Chain, n: u16, table: u64, slot: u16) -> Vec<[u8; 16]> {
    let header = HEADERS + u64::from(n) * 64;
    match chain {
        Chain::Raw(descs) => descs
            .iter()
            .take(usize::from(QUEUE_SIZE))
            .map(|d| desc_bytes(d.addr, d.len, d.flags, d.next))
            .collect(),
        Chain::WellFormed {
            kind,
            sector,
            segments,
            ranges,
            header_len,
            status_len,
            ..
        } => {
            let mut raw = [0u8; 16];
            raw[0..4].copy_from_slice(&kind.code().to_le_bytes());
            raw[8..16].copy_from_slice(&sector.to_le_bytes());
            let _ = mem.write_slice(&raw, GuestAddress(header));
            let header_len = if *header_len < 240 {
                16
            } else {
                u32::from(*header_len % 32)
            };
            let mut descs = vec![(header, header_len, 0u16)];
            if matches!(kind, Kind::Discard | Kind::WriteZeroes) {
                let at = header + 32;
                for (i, r) in ranges.iter().take(2).enumerate() {
                    let mut bytes = [0u8; 16];
                    bytes[0..8].copy_from_slice(&u64::from(r.sector).to_le_bytes());
                    bytes[8..12].copy_from_slice(&(r.sectors % 4096).to_le_bytes());
                    bytes[12..16].copy_from_slice(&u32::from(r.flags % 4).to_le_bytes());
                    let _ = mem.write_slice(&bytes, GuestAddress(at + i as u64 * 16));
                }
                descs.push((at, 16 * ranges.len().min(2) as u32, 0));
            }
            for s in segments.iter().take(8) {
                let write = kind.device_writes() != s.wrong_way;
                let len = u32::from(s.sectors) * 512 / 4;
                descs.push((
                    s.place.addr(),
                    len,
                    if write { VRING_DESC_F_WRITE as u16 } else { 0 },
                ));
            }
            let status_len = if *status_len < 250 { 1 } else { 0 };
            descs.push((header + 24, status_len, VRING_DESC_F_WRITE as u16));
            let last = descs.len() - 1;
            descs
                .iter()
                .enumerate()
                .map(|(i, (addr, len, flags))| {
                    let (flags, next) = if i == last {
                        (*flags, 0)
                    } else {
                        (flags | VRING_DESC_F_NEXT as u16, slot + i as u16 + 1)
                    };
                    let _ = table;
                    desc_bytes(*addr, *len, flags, next)
                })
                .collect()
        }
    }
}

fn run(input: &Input) {
    let mem = GuestMemory::from_ranges(&[
        (GuestAddress(0), REGION0_END as usize),
        (
            GuestAddress(REGION1_START),
            (REGION1_END - REGION1_START) as usize,
        ),
    ])
    .expect("guest memory");
    let mut next_desc: u16 = 0;
    let mut heads = Vec::new();
    for (n, chain) in input
        .chains
        .iter()
        .take(usize::from(QUEUE_SIZE))
        .enumerate()
    {
        let n = n as u16;
        let indirect = matches!(chain, Chain::WellFormed { indirect: true, .. });
        if indirect {
            // One descriptor in the ring points at a table of its own.
            let table = INDIRECT + u64::from(n) * 16 * 16;
            let descs = write_chain(&mem, chain, n, table, 0);
            for (i, d) in descs.iter().enumerate() {
                let _ = mem.write_slice(d, GuestAddress(table + i as u64 * 16));
            }
            if next_desc >= QUEUE_SIZE {
                break;
            }
            let d = desc_bytes(
                table,
                descs.len() as u32 * 16,
                VRING_DESC_F_INDIRECT as u16,
                0,
            );
            let _ = mem.write_slice(&d, GuestAddress(DESC + u64::from(next_desc) * 16));
            heads.push(next_desc);
            next_desc += 1;
        } else {
            let descs = write_chain(&mem, chain, n, DESC, next_desc);
            if descs.is_empty() || usize::from(next_desc) + descs.len() > usize::from(QUEUE_SIZE) {
                break;
            }
            for (i, d) in descs.iter().enumerate() {
                let at = DESC + (u64::from(next_desc) + i as u64) * 16;
                let _ = mem.write_slice(d, GuestAddress(at));
            }
            heads.push(next_desc);
            next_desc += descs.len() as u16;
        }
    }
    heads.extend(input.stray_heads.iter().take(8));
    for (i, head) in heads.iter().enumerate() {
        let slot = AVAIL + 4 + (i as u64 % u64::from(QUEUE_SIZE)) * 2;
        let _ = mem.write_obj(head.to_le(), GuestAddress(slot));
    }
    let _ = mem.write_obj((heads.len() as u16).to_le(), GuestAddress(AVAIL + 2));

    let atomic = GuestMemoryAtomic::new(mem);
    let vring = Vring::new(atomic.clone(), QUEUE_SIZE).expect("vring");
    vring.set_queue_size(QUEUE_SIZE);
    if vring.set_queue_info(DESC, AVAIL, USED).is_err() {
        return;
    }
    vring.set_queue_event_idx(true);
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    let disk: Arc<dyn Disk> = Arc::new(MemoryDisk::new(CAPACITY).expect("memory disk"));
    let device = Arc::new(BlkDevice::new(
        disk.as_ref(),
        input.readonly,
        1,
        "vbmq-fuzz-serial",
    ));
    let settings = QueueSettings::unpinned(WaitMode::Event, QUEUE_SIZE);
    let mut worker = BlkQueue::worker(
        0,
        settings,
        device,
        disk,
        atomic.clone(),
        Default::default(),
    );
    worker.set_up(&vring, true);
    worker.run(&vring, &AtomicBool::new(false));
    worker.drain(&vring);

    // Only heads that exist come back, and never more than were offered.
    let mem = atomic.memory();
    let used: u16 = mem.read_obj(GuestAddress(USED + 2)).expect("used idx");
    assert!(usize::from(used) <= heads.len().max(usize::from(QUEUE_SIZE)));
    for i in 0..u64::from(used.min(QUEUE_SIZE)) {
        let id: u32 = mem
            .read_obj(GuestAddress(USED + 4 + i * 8))
            .expect("used elem");
        assert!(id < u32::from(QUEUE_SIZE), "returned head {id}");
    }
}

/// One input: chains through a real queue worker over a memory disk.
pub fn queue_requests(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        run(&input);
    }
}
