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

/// The bits of `SetattrIn::valid` (`FATTR_*` in `<linux/fuse.h>`): what a SETATTR changes.
pub const FATTR_MODE: u32 = 0x1;
/// Changes the owner.
pub const FATTR_UID: u32 = 0x2;
/// Changes the group.
pub const FATTR_GID: u32 = 0x4;
/// Changes the size.
pub const FATTR_SIZE: u32 = 0x8;
/// Sets the access time to `atime`.
pub const FATTR_ATIME: u32 = 0x10;
/// Sets the modification time to `mtime`.
pub const FATTR_MTIME: u32 = 0x20;
/// Sets the modification time to now.
pub const FATTR_MTIME_NOW: u32 = 0x100;

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
