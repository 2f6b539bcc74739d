//! Legal but unusual descriptor layouts (virtio 1.x message framing): the parser reads the
//! request by byte, wherever the driver split it.

use crate::guest::GuestMemory;
use virtio_bindings::virtio_blk::*;
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use super::request_tests::{DATA, HDR, STATUS, WRITE, desc, error_of, header, range, run};
use super::*;

/// The guest addresses an iovec list covers, as (gpa, len), given guest memory based at 0.
fn spans(mem_base: *const u8, iov: &[libc::iovec], count: u32) -> Vec<(u64, usize)> {
    iov[..count as usize]
        .iter()
        .map(|v| ((v.iov_base as usize - mem_base as usize) as u64, v.iov_len))
        .collect()
}

/// `run`, with the guest memory's host base so iovecs can be mapped back to guest addresses.
fn parse_at(
    descs: &[virtio_queue::desc::RawDescriptor],
    setup: impl FnOnce(&GuestMemory),
) -> (Result<Request, Rejection>, Vec<(u64, usize)>) {
    let mut base = std::ptr::null();
    let (result, iov) = run(false, descs, |m| {
        base = m.get_host_address(GuestAddress(0)).unwrap().cast_const();
        setup(m);
    });
    let count = result.as_ref().map(|r| r.iov_count()).unwrap_or(0);
    (result, spans(base, &iov, count))
}

#[test]
fn a_header_split_at_any_byte_is_read_whole() {
    for kind in [VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT] {
        let flags = if kind == VIRTIO_BLK_T_IN { WRITE } else { 0 };
        for cut in 1..16u32 {
            let descs = [
                desc(HDR, cut, 0),
                desc(HDR + u64::from(cut), 16 - cut, 0),
                desc(DATA, 1024, flags),
                desc(STATUS, 1, WRITE),
            ];
            let (result, iov) = parse_at(&descs, |m| header(m, kind, 6));
            let request = result.unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
            assert_eq!(
                (request.offset(), request.data_len(), request.status),
                (6 * 512, 1024, GuestAddress(STATUS)),
                "cut at {cut}"
            );
            assert_eq!(iov, [(DATA, 1024)], "cut at {cut}");
        }
    }
    // One byte per descriptor.
    let mut descs: Vec<_> = (0..16).map(|i| desc(HDR + i, 1, 0)).collect();
    descs.extend([desc(DATA, 512, WRITE), desc(STATUS, 1, WRITE)]);
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_IN, 3));
    assert_eq!(result.unwrap().offset(), 3 * 512);
    assert_eq!(iov, [(DATA, 512)]);
}

#[test]
fn header_and_data_in_one_descriptor() {
    // A write whose header is followed by its data in the same buffer.
    let descs = [desc(HDR, 16 + 1024, 0), desc(STATUS, 1, WRITE)];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_OUT, 2));
    let request = result.unwrap();
    assert_eq!(
        (request.kind(), request.offset(), request.data_len()),
        (RequestType::Out, 1024, 1024)
    );
    assert_eq!(iov, [(HDR + 16, 1024)]);
    // The header split in two, the second part carrying the data too.
    let descs = [
        desc(HDR, 5, 0),
        desc(HDR + 5, 11 + 512, 0),
        desc(DATA, 512, 0),
        desc(STATUS, 1, WRITE),
    ];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_OUT, 0));
    assert_eq!(result.unwrap().data_len(), 1024);
    assert_eq!(iov, [(HDR + 16, 512), (DATA, 512)]);
}

#[test]
fn data_and_status_in_one_descriptor() {
    let descs = [desc(HDR, 16, 0), desc(DATA, 2048 + 1, WRITE)];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_IN, 1));
    let request = result.unwrap();
    assert_eq!(
        (request.data_len(), request.status),
        (2048, GuestAddress(DATA + 2048))
    );
    assert_eq!(iov, [(DATA, 2048)]);
    // After other data descriptors.
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA + 8192, 512, WRITE),
        desc(DATA, 512 + 1, WRITE),
    ];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_IN, 1));
    assert_eq!(result.unwrap().status, GuestAddress(DATA + 512));
    assert_eq!(iov, [(DATA + 8192, 512), (DATA, 512)]);
}

#[test]
fn every_part_shares_a_descriptor_with_its_neighbour() {
    // IN: header and nothing else readable; data and status in one writable buffer, split twice.
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 100, WRITE),
        desc(DATA + 100, 412 + 1, WRITE),
    ];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(result.unwrap().status, GuestAddress(DATA + 512));
    assert_eq!(iov, [(DATA, 100), (DATA + 100, 412)]);
    // OUT: header and data in one readable buffer, the status alone (it must be writable).
    let descs = [desc(HDR, 16 + 512, 0), desc(STATUS, 1, WRITE)];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_OUT, 0));
    assert_eq!(result.unwrap().data_len(), 512);
    assert_eq!(iov, [(HDR + 16, 512)]);
}

#[test]
fn get_id_split_anywhere() {
    for cut in 1..20u32 {
        let descs = [
            desc(HDR, 16, 0),
            desc(DATA, cut, WRITE),
            desc(DATA + 4096, 20 - cut, WRITE),
            desc(STATUS, 1, WRITE),
        ];
        let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_GET_ID, 0));
        let request = result.unwrap();
        assert_eq!(
            (request.kind(), request.data_len()),
            (RequestType::GetId, 20)
        );
        assert_eq!(
            iov,
            [(DATA, cut as usize), (DATA + 4096, 20 - cut as usize)]
        );
    }
    // The ID and the status in one buffer, the header split.
    let descs = [desc(HDR, 7, 0), desc(HDR + 7, 9, 0), desc(DATA, 21, WRITE)];
    let (result, iov) = parse_at(&descs, |m| header(m, VIRTIO_BLK_T_GET_ID, 0));
    assert_eq!(result.unwrap().status, GuestAddress(DATA + 20));
    assert_eq!(iov, [(DATA, 20)]);
}

#[test]
fn discard_ranges_split_anywhere_and_sharing_the_header() {
    let setup = |m: &GuestMemory| {
        header(m, VIRTIO_BLK_T_DISCARD, 0);
        range(m, DATA, 8, 8, 0);
        range(m, DATA + 16, 64, 16, 0);
    };
    for cut in 1..32u32 {
        let descs = [
            desc(HDR, 16, 0),
            desc(DATA, cut, 0),
            desc(DATA + u64::from(cut), 32 - cut, 0),
            desc(STATUS, 1, WRITE),
        ];
        let (result, _) = run(false, &descs, setup);
        let request = result.unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
        assert_eq!(request.range_count(), 2, "cut at {cut}");
    }
    // Header and ranges in one buffer: the ranges right after the header.
    let descs = [desc(DATA - 16, 16 + 32, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(false, &descs, |m| {
        let mut raw = [0u8; 16];
        raw[0..4].copy_from_slice(&VIRTIO_BLK_T_WRITE_ZEROES.to_le_bytes());
        m.write_slice(&raw, GuestAddress(DATA - 16)).unwrap();
        range(m, DATA, 8, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
        range(m, DATA + 16, 64, 16, 0);
    });
    let request = result.unwrap();
    assert_eq!(
        (request.kind(), request.range_count()),
        (RequestType::WriteZeroes, 2)
    );
}

#[test]
fn illegal_layouts_are_still_refused() {
    let status = Some(GuestAddress(STATUS));
    // Readable bytes after writable ones.
    let descs = [
        desc(HDR, 16, 0),
        desc(DATA, 512, WRITE),
        desc(DATA + 4096, 512, 0),
        desc(STATUS, 1, WRITE),
    ];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(error_of(result), (RequestError::WrongDirection, status));
    // A header cut short by a writable buffer.
    let descs = [
        desc(HDR, 15, 0),
        desc(DATA, 513, WRITE),
        desc(STATUS, 1, WRITE),
    ];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(error_of(result), (RequestError::BadHeader, status));
    // A header and nothing else but the status byte, 15 bytes long.
    let descs = [desc(HDR, 15, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_FLUSH, 0));
    assert_eq!(error_of(result), (RequestError::BadHeader, status));
    // A read with more readable bytes after its header.
    let descs = [desc(HDR, 16 + 512, 0), desc(STATUS, 1, WRITE)];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_IN, 0));
    assert_eq!(error_of(result), (RequestError::WrongDirection, status));
    // A write's bytes in a writable buffer are not its data: padding before the status, as QEMU
    // reads them.
    let descs = [desc(HDR, 16, 0), desc(DATA, 513, WRITE)];
    let (result, _) = run(false, &descs, |m| header(m, VIRTIO_BLK_T_OUT, 0));
    assert_eq!(result.unwrap().data_len(), 0);
}
