//! The parser over virtio-queue's `MockSplitQueue`: real descriptor tables in guest memory.

use crate::guest::GuestMemory;
use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{RawDescriptor, split::Descriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::backend::Geometry;

pub(super) const WRITE: u16 = VRING_DESC_F_WRITE as u16;
pub(super) const HDR: u64 = 0x10_0000;
pub(super) const DATA: u64 = 0x20_0000;
pub(super) const STATUS: u64 = 0x30_0000;
pub(super) const MEM_END: u64 = 0x100_0000;

pub(super) fn device(readonly: bool) -> BlkDevice {
    BlkDevice {
        limits: Default::default(),
        capacity: std::sync::atomic::AtomicU64::new(1 << 20),
        geometry: Geometry {
            capacity: 1 << 20,
            block_size: 512,
            physical_block_exp: 0,
        },
        readonly,
        discard: true,
        num_queues: 1,
        serial: [0; 20],
        writer_seat: Default::default(),
        writes: super::WritesInFlight::new(1),
        guest_gate: Default::default(),
    }
}

pub(super) fn desc(addr: u64, len: u32, flags: u16) -> RawDescriptor {
    RawDescriptor::from(Descriptor::new(addr, len, flags, 0))
}

pub(super) fn header(mem: &GuestMemory, kind: u32, sector: u64) {
    let mut raw = [0u8; 16];
    raw[0..4].copy_from_slice(&kind.to_le_bytes());
    raw[8..16].copy_from_slice(&sector.to_le_bytes());
    mem.write_slice(&raw, GuestAddress(HDR)).unwrap();
}

pub(super) fn range(mem: &GuestMemory, at: u64, sector: u64, sectors: u32, flags: u32) {
    let mut raw = [0u8; 16];
    raw[0..8].copy_from_slice(&sector.to_le_bytes());
    raw[8..12].copy_from_slice(&sectors.to_le_bytes());
    raw[12..16].copy_from_slice(&flags.to_le_bytes());
    mem.write_slice(&raw, GuestAddress(at)).unwrap();
}

pub(super) fn memory() -> GuestMemory {
    GuestMemory::from_ranges(&[(GuestAddress(0), MEM_END as usize)]).unwrap()
}

/// Parses one chain built from `descs`; `setup` writes headers and ranges first.
pub(super) fn run(
    readonly: bool,
    descs: &[RawDescriptor],
    setup: impl FnOnce(&GuestMemory),
) -> (Result<Request, Rejection>, Vec<libc::iovec>) {
    let mem = memory();
    setup(&mem);
    let queue = MockSplitQueue::new(&mem, 32);
    let chain = queue.build_desc_chain(descs).unwrap();
    let mut iov = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        SEG_MAX as usize
    ];
    let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];
    let result = parse(chain, &mem, &device(readonly), &mut iov, &mut ranges);
    (result, iov)
}

pub(super) fn error_of(result: Result<Request, Rejection>) -> (RequestError, Option<GuestAddress>) {
    let rejection = result.unwrap_err();
    (rejection.error, rejection.status)
}

#[test]
fn read_with_two_segments() {
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 4096, WRITE),
        desc(DATA + 8192, 512, WRITE),
        desc(STATUS, 1, WRITE),
    ];
    let (result, iov) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 8));
    let request = result.unwrap();
    assert_eq!(request.kind(), RequestType::In);
    assert_eq!(
        (request.offset(), request.data_len(), request.iov_count()),
        (4096, 4608, 2)
    );
    assert_eq!(request.status, GuestAddress(STATUS));
    assert_eq!(iov[0].iov_len, 4096);
    assert_eq!(iov[1].iov_len, 512);
}

#[test]
fn write_and_flush_and_get_id() {
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 1024, 0),
        desc(STATUS, 1, WRITE),
    ];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_OUT, 0));
    assert_eq!(result.unwrap().kind(), RequestType::Out);
    let descs = [desc(HDR, 16, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(true, &descs, |m| header(m, VIRTIO_BLK_T_FLUSH, 0));
    assert_eq!(
        result.unwrap().kind(),
        RequestType::Flush,
        "flush on a read-only disk"
    );
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 20, WRITE),
        desc(STATUS, 1, WRITE),
    ];
    let (result, _) = run(true, &descs, |m| header(m, VIRTIO_BLK_T_GET_ID, 0));
    let request = result.unwrap();
    assert_eq!(
        (request.kind(), request.data_len(), request.iov_count()),
        (RequestType::GetId, 20, 1)
    );
}

#[test]
fn bad_requests_get_ioerr_or_unsupp_with_their_status() {
    let status = Some(GuestAddress(STATUS));
    let io = [
        desc(HDR, 16, 0),
        desc(DATA, 4096, WRITE),
        desc(STATUS, 1, WRITE),
    ];
    let cases: Vec<(&str, Vec<RawDescriptor>, u32, u64, RequestError)> = vec![
        (
            "at capacity",
            io.to_vec(),
            VIRTIO_BLK_T_IN,
            2048,
            RequestError::OutOfRange,
        ),
        (
            "across capacity",
            io.to_vec(),
            VIRTIO_BLK_T_IN,
            2047,
            RequestError::OutOfRange,
        ),
        (
            "sector overflow",
            io.to_vec(),
            VIRTIO_BLK_T_IN,
            u64::MAX / 256,
            RequestError::OutOfRange,
        ),
        (
            "unknown type",
            io.to_vec(),
            99,
            0,
            RequestError::Unsupported(99),
        ),
        (
            "not a multiple of 512",
            vec![
                desc(HDR, 16, 0),
                desc(DATA, 1000, WRITE),
                desc(STATUS, 1, WRITE),
            ],
            VIRTIO_BLK_T_IN,
            0,
            RequestError::Unaligned,
        ),
        (
            "read into a device-readable buffer",
            vec![desc(HDR, 16, 0), desc(DATA, 512, 0), desc(STATUS, 1, WRITE)],
            VIRTIO_BLK_T_IN,
            0,
            RequestError::WrongDirection,
        ),
        (
            "write from a device-writable buffer",
            vec![
                desc(HDR, 16, 0),
                desc(DATA, 512, WRITE),
                desc(STATUS, 1, WRITE),
            ],
            VIRTIO_BLK_T_OUT,
            0,
            RequestError::WrongDirection,
        ),
        (
            "short header",
            vec![
                desc(HDR, 8, 0),
                desc(DATA, 512, WRITE),
                desc(STATUS, 1, WRITE),
            ],
            VIRTIO_BLK_T_IN,
            0,
            RequestError::BadHeader,
        ),
        (
            "buffer outside guest memory",
            vec![
                desc(HDR, 16, 0),
                desc(MEM_END - 512, 1024, WRITE),
                desc(STATUS, 1, WRITE),
            ],
            VIRTIO_BLK_T_IN,
            0,
            RequestError::BadAddress,
        ),
    ];
    for (name, descs, kind, sector, expected) in cases {
        let (result, _) = run(false, &descs, |m| header(m, kind, sector));
        assert_eq!(error_of(result), (expected, status), "{name}");
    }
    assert_eq!(
        RequestError::Unsupported(99).status(),
        VIRTIO_BLK_S_UNSUPP as u8
    );
    assert_eq!(RequestError::OutOfRange.status(), VIRTIO_BLK_S_IOERR as u8);
}

#[test]
fn writes_to_a_readonly_disk_are_refused() {
    let descs = [desc(HDR, 16, 0), desc(DATA, 512, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(true, &descs, |m| header(m, VIRTIO_BLK_T_OUT, 0));
    assert_eq!(
        error_of(result),
        (RequestError::ReadOnly, Some(GuestAddress(STATUS)))
    );
    let descs = [desc(HDR, 16, 0), desc(DATA, 16, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(true, &descs, |m| {
        header(m, VIRTIO_BLK_T_DISCARD, 0);
        range(m, DATA, 0, 8, 0);
    });
    assert_eq!(error_of(result).0, RequestError::ReadOnly);
}

#[test]
fn chains_without_a_status_byte() {
    for descs in [
        vec![desc(HDR, 16, 0), desc(DATA, 512, WRITE), desc(STATUS, 1, 0)],
        vec![
            desc(HDR, 16, 0),
            desc(DATA, 512, WRITE),
            desc(STATUS, 0, WRITE),
        ],
        vec![desc(HDR, 16, 0)],
    ] {
        let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
        assert_eq!(error_of(result), (RequestError::NoStatus, None));
    }
}

#[test]
fn too_many_segments() {
    let mut descs = vec![desc(HDR, 16, 0)];
    descs.extend((0..SEG_MAX as u64 + 1).map(|i| desc(DATA + i * 512, 512, WRITE)));
    descs.push(desc(STATUS, 1, WRITE));
    let mem = memory();
    header(&mem, VIRTIO_BLK_T_IN, 0);
    let queue = MockSplitQueue::new(&mem, 256);
    let chain = queue.build_desc_chain(&descs).unwrap();
    let mut iov = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        SEG_MAX as usize
    ];
    let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];
    let result = parse(chain, &mem, &device(false), &mut iov, &mut ranges);
    assert_eq!(error_of(result).0, RequestError::TooManySegments);
}

#[test]
fn discard_and_write_zeroes_ranges() {
    let descs = [desc(HDR, 16, 0), desc(DATA, 32, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(false, &descs, |m| {
        header(m, VIRTIO_BLK_T_WRITE_ZEROES, 0);
        range(m, DATA, 8, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
        range(m, DATA + 16, 100, 1, 0);
    });
    assert_eq!(result.unwrap().range_count(), 2);
    let bad: Vec<(&str, u32, u64, u32, u32, RequestError)> = vec![
        (
            "past the end",
            VIRTIO_BLK_T_DISCARD,
            2040,
            16,
            0,
            RequestError::OutOfRange,
        ),
        (
            "overflow",
            VIRTIO_BLK_T_DISCARD,
            u64::MAX - 1,
            8,
            0,
            RequestError::OutOfRange,
        ),
        (
            "unmap on discard",
            VIRTIO_BLK_T_DISCARD,
            0,
            8,
            1,
            RequestError::BadRangeFlags,
        ),
        (
            "reserved flags",
            VIRTIO_BLK_T_WRITE_ZEROES,
            0,
            8,
            2,
            RequestError::BadRangeFlags,
        ),
        (
            "too long",
            VIRTIO_BLK_T_DISCARD,
            0,
            u32::MAX,
            0,
            RequestError::BadRanges,
        ),
    ];
    let descs = [desc(HDR, 16, 0), desc(DATA, 16, 0), desc(STATUS, 1, WRITE)];
    for (name, kind, sector, sectors, flags, expected) in bad {
        let (result, _) = run(false, &descs, |m| {
            header(m, kind, 0);
            range(m, DATA, sector, sectors, flags);
        });
        assert_eq!(error_of(result).0, expected, "{name}");
    }
    for len in [0, 15, 16 * (DISCARD_SEG_MAX + 1)] {
        let descs = [desc(HDR, 16, 0), desc(DATA, len, 0), desc(STATUS, 1, WRITE)];
        let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_DISCARD, 0));
        assert_eq!(error_of(result).0, RequestError::BadRanges, "length {len}");
    }
}

#[test]
fn looping_and_nested_indirect_chains_end() {
    let mem = memory();
    header(&mem, VIRTIO_BLK_T_IN, 0);
    let queue = MockSplitQueue::new(&mem, 16);
    // A chain whose last descriptor points back at the first.
    let looped = [
        RawDescriptor::from(Descriptor::new(HDR, 16, VRING_DESC_F_NEXT as u16, 1)),
        RawDescriptor::from(Descriptor::new(
            DATA,
            512,
            (VRING_DESC_F_NEXT as u16) | WRITE,
            0,
        )),
    ];
    let chain = queue.build_multiple_desc_chains(&looped).unwrap();
    let mut iov = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        SEG_MAX as usize
    ];
    let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];
    assert!(parse(chain, &mem, &device(false), &mut iov, &mut ranges).is_err());
    // An indirect table of length 0, and one that is not a multiple of 16.
    for len in [0, 24] {
        let descs = [desc(0x40_0000, len, VRING_DESC_F_INDIRECT as u16)];
        let chain = queue.build_desc_chain(&descs).unwrap();
        let result = parse(chain, &mem, &device(false), &mut iov, &mut ranges);
        assert_eq!(
            error_of(result),
            (RequestError::EmptyChain, None),
            "indirect length {len}"
        );
    }
}

#[test]
fn chains_cut_short_or_with_an_unwritable_status_have_no_status() {
    // Status outside guest memory: nowhere to write it.
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 512, WRITE),
        desc(MEM_END + 4096, 1, WRITE),
    ];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(error_of(result), (RequestError::NoStatus, None));
    // A status descriptor that links on past the queue: the chain was cut, not complete.
    let mem = memory();
    header(&mem, VIRTIO_BLK_T_IN, 0);
    let queue = MockSplitQueue::new(&mem, 16);
    let cut = [
        RawDescriptor::from(Descriptor::new(HDR, 16, VRING_DESC_F_NEXT as u16, 1)),
        RawDescriptor::from(Descriptor::new(
            DATA,
            512,
            (VRING_DESC_F_NEXT as u16) | WRITE,
            2,
        )),
        RawDescriptor::from(Descriptor::new(
            STATUS,
            1,
            (VRING_DESC_F_NEXT as u16) | WRITE,
            99,
        )),
    ];
    let chain = queue.build_multiple_desc_chains(&cut).unwrap();
    let mut iov = vec![
        libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0
        };
        SEG_MAX as usize
    ];
    let mut ranges = vec![Range::default(); DISCARD_SEG_MAX as usize];
    let result = parse(chain, &mem, &device(false), &mut iov, &mut ranges);
    assert_eq!(error_of(result), (RequestError::BrokenChain, None));
}

#[test]
fn status_sharing_a_buffer_goes_in_its_last_byte() {
    let descs = [desc(HDR, 16, 0), desc(DATA, 512, WRITE)];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(
        error_of(result),
        (RequestError::Unaligned, Some(GuestAddress(DATA + 511)))
    );
}
