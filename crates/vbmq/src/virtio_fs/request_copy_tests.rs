//! The copy over virtio-queue's `MockSplitQueue`: real descriptor chains in guest memory,
//! rewritten after the copy as a hostile guest would while the request is served.

use fuse_backend_rs::abi::fuse_abi::SetattrIn;
use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
use virtio_queue::desc::{RawDescriptor, split::Descriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::guest::GuestMemory;

const REQUEST: u64 = 0x10_0000;
const REPLY: u64 = 0x40_0000;

fn header(opcode: Opcode, len: usize) -> Vec<u8> {
    let header = InHeader {
        len: u32::try_from(len).unwrap(),
        opcode: opcode as u32,
        unique: 7,
        nodeid: 1,
        ..InHeader::default()
    };
    header.as_slice().to_vec()
}

/// What the server would read.
struct Served {
    header: InHeader,
    available: usize,
    bytes: Vec<u8>,
}

/// Writes `request` into the readable buffers `parts` (address, length), copies it, then lets
/// `rewrite` change guest memory, then reads everything from the reader the server would get.
fn take_then_rewrite(
    request: &[u8],
    parts: &[(u64, u32)],
    rewrite: impl FnOnce(&GuestMemory),
) -> Result<Served, NotCopied> {
    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), 0x80_0000)]).unwrap();
    let mut descs = Vec::new();
    let mut at = 0usize;
    for &(addr, len) in parts {
        let end = (at + len as usize).min(request.len());
        mem.write_slice(&request[at.min(end)..end], GuestAddress(addr))
            .unwrap();
        at = end;
        descs.push(RawDescriptor::from(Descriptor::new(addr, len, 0, 0)));
    }
    let write = u16::try_from(VRING_DESC_F_WRITE).unwrap();
    descs.push(RawDescriptor::from(Descriptor::new(REPLY, 4096, write, 0)));
    let queue = MockSplitQueue::new(&mem, 16);
    let chain = queue.build_desc_chain(&descs).unwrap();
    let (guest, _) = Reader::with_writer(&mem, chain).unwrap();
    let mut copy = RequestCopy::default();
    let (header, mut reader) = copy.take(guest)?;
    rewrite(&mem);
    let available = reader.available_bytes();
    let mut bytes = vec![0u8; available];
    reader.read_exact(&mut bytes).unwrap();
    Ok(Served {
        header,
        available,
        bytes,
    })
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap()
}

#[test]
fn header_and_arguments_are_served_from_the_copy() {
    let args = SetattrIn {
        valid: 1,
        mode: 0o644,
        ..SetattrIn::default()
    };
    let len = size_of::<InHeader>() + size_of::<SetattrIn>();
    let request = [header(Opcode::Getattr, len), args.as_slice().to_vec()].concat();
    // The guest turns GETATTR into SETATTR, and the mode into something else, after the copy.
    let mut flipped = request.clone();
    flipped[4] = Opcode::Setattr as u8;
    flipped[size_of::<InHeader>() + 32] = 0xff;
    let served = take_then_rewrite(&request, &[(REQUEST, len32(len))], |mem| {
        mem.write_slice(&flipped, GuestAddress(REQUEST)).unwrap();
    })
    .unwrap();
    assert_eq!(served.header.opcode, Opcode::Getattr as u32);
    assert_eq!(served.available, len);
    assert!(
        served.bytes == request,
        "the server read guest memory again"
    );
}

#[test]
fn a_request_split_over_descriptors_is_copied_whole() {
    let len = size_of::<InHeader>() + 5;
    let request = [header(Opcode::Lookup, len), b"file\0".to_vec()].concat();
    let parts = [(REQUEST, 10), (REQUEST + 0x1000, 33), (REQUEST + 0x3000, 2)];
    let served = take_then_rewrite(&request, &parts, |mem| {
        for (addr, _) in parts {
            mem.write_slice(&[0u8; 64], GuestAddress(addr)).unwrap();
        }
    })
    .unwrap();
    assert_eq!(served.header.opcode, Opcode::Lookup as u32);
    assert!(served.bytes == request);
}

#[test]
fn a_writes_data_stays_in_guest_memory_behind_the_copied_arguments() {
    let write_in = WriteIn {
        size: 4096,
        ..WriteIn::default()
    };
    let head_len = size_of::<InHeader>() + size_of::<WriteIn>();
    let len = head_len + 4096;
    let request = [
        header(Opcode::Write, len),
        write_in.as_slice().to_vec(),
        vec![0xaa; 4096],
    ]
    .concat();
    let served = take_then_rewrite(&request, &[(REQUEST, len32(len))], |mem| {
        mem.write_slice(&vec![0x55; len], GuestAddress(REQUEST))
            .unwrap();
    })
    .unwrap();
    assert_eq!(served.available, len);
    assert!(served.bytes[..head_len] == request[..head_len], "arguments");
    // The data is read where the guest put it (no copy): its rewrite shows.
    assert!(served.bytes[head_len..].iter().all(|&b| b == 0x55), "data");
}

#[test]
fn a_request_shorter_than_a_header_or_larger_than_allowed_is_not_copied() {
    let short = take_then_rewrite(&[1u8; 39], &[(REQUEST, 39)], |_| {});
    assert!(matches!(short, Err(NotCopied::Unreadable)));
    let len = MAX_REQUEST + 1;
    let request = header(Opcode::Setxattr, len);
    let large = take_then_rewrite(&request, &[(REQUEST, len32(len))], |_| {});
    assert!(matches!(large, Err(NotCopied::TooLarge(h)) if h.unique == 7));
    // A WRITE of that size is fine: only its header and arguments are copied.
    let request = header(Opcode::Write, len);
    let write = take_then_rewrite(&request, &[(REQUEST, len32(len))], |_| {}).unwrap();
    assert_eq!(write.available, len);
}
