//! FUSE requests as the guest's driver frames them: an `InHeader`, the operation's arguments,
//! then its names, each NUL-terminated.

pub use fuse_backend_rs::abi::fuse_abi::{
    AccessIn, AttrOut, BatchForgetIn, CopyFileRangeIn, CreateIn, EntryOut, FallocateIn, ForgetOne,
    GetattrIn, GetxattrIn, InHeader, InitIn, InitOut, KERNEL_MINOR_VERSION, KERNEL_VERSION, LinkIn,
    MkdirIn, MknodIn, Opcode, OpenIn, OpenOut, OutHeader, ROOT_ID, ReadIn, ReleaseIn, Rename2In,
    RenameIn, SetattrIn, SetxattrIn, WriteIn,
};
pub use fuse_backend_rs::abi::virtio_fs::SetupmappingIn;
use vm_memory::ByteValued;

/// The whole request: header (its `len` set), `args`, then `names`.
pub fn request(opcode: Opcode, unique: u64, node: u64, args: &[u8], names: &[&[u8]]) -> Vec<u8> {
    request_as((0, 0), opcode, unique, node, args, names)
}

/// As [`request`], sent by the guest's user and group `ids` (root's in [`request`]).
pub fn request_as(
    ids: (u32, u32),
    opcode: Opcode,
    unique: u64,
    node: u64,
    args: &[u8],
    names: &[&[u8]],
) -> Vec<u8> {
    let mut body = args.to_vec();
    for name in names {
        body.extend_from_slice(name);
        body.push(0);
    }
    let len = size_of::<InHeader>() + body.len();
    let header = InHeader {
        len: u32::try_from(len).unwrap_or(u32::MAX),
        opcode: opcode as u32,
        unique,
        nodeid: node,
        uid: ids.0,
        gid: ids.1,
        ..InHeader::default()
    };
    let mut out = header.as_slice().to_vec();
    out.extend(body);
    out
}

/// A request's argument struct as bytes.
pub fn args<T: ByteValued>(value: &T) -> &[u8] {
    value.as_slice()
}
