//! Requests framed by hand, for opcodes and arguments the client has no method for.

use std::time::Duration;

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, Opcode, OutHeader};
use vm_memory::{Bytes, GuestAddress};

/// Sends a request with any opcode number and returns its reply header (`None`: the request
/// was returned with no reply, as FORGET is).
pub fn raw_call(
    client: &mut FsClient,
    opcode: u32,
    node: u64,
    args: &[u8],
    names: &[&[u8]],
) -> Option<OutHeader> {
    let unique = client.next_unique();
    let mut request = fuse::request(Opcode::Getattr, unique, node, args, names);
    request[4..8].copy_from_slice(&opcode.to_le_bytes());
    client.submit(0, &request, 4096).unwrap();
    client.kick().unwrap();
    let (_, written) = client
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("opcode {opcode}: no answer"));
    if written < 16 {
        return None;
    }
    let header = client.reply_header(0).unwrap();
    assert_eq!(
        header.unique, unique,
        "opcode {opcode}: another request's reply"
    );
    Some(header)
}

/// The errno of a reply (0: success).
pub fn errno(header: &OutHeader) -> i32 {
    -header.error
}

/// Writes `bytes` into the client's guest memory at `at`.
pub fn put(client: &FsClient, bytes: &[u8], at: u64) {
    client
        .memory()
        .write_slice(bytes, GuestAddress(at))
        .unwrap();
}
