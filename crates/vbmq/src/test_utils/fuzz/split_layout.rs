//! Legal requests cut into descriptors at any bytes (virtio 1.x message framing): the header,
//! the data or range list and the status byte laid out as one run of guest bytes, then cut
//! wherever the input says (and always where the device-readable part ends). The parser must
//! accept every such chain and find the same request in it; with one piece's direction flipped
//! so that the layout is no longer legal, it must refuse it.

use arbitrary::{Arbitrary, Unstructured};
use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{RawDescriptor, split::Descriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::backend::Geometry;
use crate::virtio_blk::{BlkDevice, DISCARD_SEG_MAX, Range, RequestType, SEG_MAX, parse};

/// Where the request's bytes start.
const START: u64 = 0x10_0000;
const CAPACITY: u64 = 1 << 20;

#[derive(Arbitrary, Debug)]
struct Split {
    kind: u8,
    size: u8,
    sector: u8,
    /// Byte positions to cut at (taken modulo the request's length).
    cuts: Vec<u16>,
    /// A piece whose direction is flipped, when that makes the layout illegal.
    flip: Option<u8>,
}

/// One input: a legal split request, then (if asked) the same with one piece flipped.
pub fn split_layout(data: &[u8]) {
    if let Ok(split) = Split::arbitrary_take_rest(Unstructured::new(data)) {
        check(&split);
    }
}

fn check(split: &Split) {
    let (kind, type_) = match split.kind % 4 {
        0 => (RequestType::In, VIRTIO_BLK_T_IN),
        1 => (RequestType::Out, VIRTIO_BLK_T_OUT),
        2 => (RequestType::GetId, VIRTIO_BLK_T_GET_ID),
        _ => (RequestType::WriteZeroes, VIRTIO_BLK_T_WRITE_ZEROES),
    };
    let size = u64::from(split.size % 8) + 1;
    let sector = u64::from(split.sector);
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x20_0000)]).unwrap();
    let mut bytes = vec![0u8; 16];
    bytes[0..4].copy_from_slice(&type_.to_le_bytes());
    bytes[8..16].copy_from_slice(&sector.to_le_bytes());
    let data_len = match kind {
        RequestType::In | RequestType::Out => size * 512,
        RequestType::GetId => 20,
        _ => {
            for i in 0..size {
                let mut r = [0u8; 16];
                r[0..8].copy_from_slice(&(sector + 8 * i).to_le_bytes());
                r[8..12].copy_from_slice(&8u32.to_le_bytes());
                bytes.extend_from_slice(&r);
            }
            16 * size
        }
    };
    let total = 16 + data_len + 1;
    bytes.resize(total as usize, 0);
    mem.write_slice(&bytes, GuestAddress(START)).unwrap();
    // Device-readable bytes end here; the rest is device-writable.
    let readable_end = match kind {
        RequestType::Out | RequestType::WriteZeroes => 16 + data_len,
        _ => 16,
    };
    let mut cuts: Vec<u64> = split
        .cuts
        .iter()
        .take(40)
        .map(|&c| u64::from(c) % total)
        .filter(|&c| c > 0)
        .chain([readable_end])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut at = 0;
    for end in cuts.into_iter().chain([total]) {
        if end > at {
            pieces.push((at, end - at, end > readable_end));
            at = end;
        }
    }
    let device = BlkDevice {
        limits: Default::default(),
        capacity: std::sync::atomic::AtomicU64::new(CAPACITY),
        geometry: Geometry {
            capacity: CAPACITY,
            block_size: 512,
            physical_block_exp: 0,
        },
        readonly: false,
        discard: true,
        num_queues: 1,
        serial: [0; 20],
        writer_seat: Default::default(),
        writes: crate::virtio_blk::WritesInFlight::new(1),
        guest_gate: Default::default(),
    };
    let run = |pieces: &[(u64, u64, bool)]| {
        let descs: Vec<RawDescriptor> = pieces
            .iter()
            .enumerate()
            .map(|(i, &(at, len, write))| {
                let mut flags = if write { VRING_DESC_F_WRITE as u16 } else { 0 };
                if i + 1 < pieces.len() {
                    flags |= VRING_DESC_F_NEXT as u16;
                }
                let next = (i + 1) as u16;
                RawDescriptor::from(Descriptor::new(START + at, len as u32, flags, next))
            })
            .collect();
        let queue = MockSplitQueue::new(&mem, 64);
        let chain = queue.build_multiple_desc_chains(&descs).unwrap();
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = vec![empty; SEG_MAX as usize];
        let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];
        let result = parse(chain, &mem, &device, &mut iov, &mut ranges);
        (result, iov, ranges)
    };

    let (result, iov, ranges) = run(&pieces);
    let req = result.unwrap_or_else(|e| panic!("legal layout {pieces:?} refused: {e:?}"));
    assert_eq!(req.kind(), kind, "{pieces:?}");
    assert_eq!(req.status, GuestAddress(START + total - 1), "{pieces:?}");
    let base = mem.get_host_address(GuestAddress(0)).unwrap() as usize;
    match kind {
        RequestType::In | RequestType::Out | RequestType::GetId => {
            assert_eq!(u64::from(req.data_len()), data_len, "{pieces:?}");
            if kind != RequestType::GetId {
                assert_eq!(req.offset(), sector * 512, "{pieces:?}");
            }
            // The iovecs are the data bytes, in order, and nothing else.
            let mut next = START + 16;
            for v in &iov[..req.iov_count() as usize] {
                assert_eq!((v.iov_base as usize - base) as u64, next, "{pieces:?}");
                next += v.iov_len as u64;
            }
            assert_eq!(next, START + 16 + data_len, "{pieces:?}");
        }
        _ => {
            assert_eq!(u64::from(req.range_count()), size, "{pieces:?}");
            for (i, r) in ranges[..size as usize].iter().enumerate() {
                assert_eq!(r.offset, (sector + 8 * i as u64) * 512, "{pieces:?}");
                assert_eq!(r.len, 8 * 512, "{pieces:?}");
            }
        }
    }
    // Mostly legal is not legal: readable bytes after writable ones, a header or data in a
    // buffer of the wrong direction, a status the device cannot write.
    let Some(flip) = split.flip.map(|f| usize::from(f) % pieces.len()) else {
        return;
    };
    let (at, _, write) = pieces[flip];
    let last_readable = pieces.iter().rposition(|p| !p.2);
    let writes_data = matches!(kind, RequestType::Out | RequestType::WriteZeroes);
    // The last readable piece of a write, all data, turned writable becomes padding before the
    // status (a shorter request, still legal).
    if !write && writes_data && Some(flip) == last_readable && at >= 16 {
        return;
    }
    let mut flipped = pieces.clone();
    flipped[flip].2 = !write;
    let (result, _, _) = run(&flipped);
    assert!(result.is_err(), "illegal layout {flipped:?} accepted");
}
