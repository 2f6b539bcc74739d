//! `readonly=on`: the FUSE requests that would change the share, refused with `EROFS` before
//! the file system sees them.

use fuse_backend_rs::abi::fuse_abi::{InHeader, Opcode, OpenIn};
use fuse_backend_rs::transport::Reader;
use vm_memory::bitmap::BitmapSlice;

/// Whether the request under `header` (the rest of it in `body`) changes the share.
pub(super) fn modifies<S: BitmapSlice>(header: &InHeader, body: &Reader<'_, S>) -> bool {
    let opens_for_writing = |flags: u32| {
        let flags = flags.cast_signed();
        flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
    };
    match Opcode::from(header.opcode) {
        Opcode::Setattr
        | Opcode::Symlink
        | Opcode::Mknod
        | Opcode::Mkdir
        | Opcode::Unlink
        | Opcode::Rmdir
        | Opcode::Rename
        | Opcode::Rename2
        | Opcode::Link
        | Opcode::Write
        | Opcode::Setxattr
        | Opcode::Removexattr
        | Opcode::Create
        | Opcode::Fallocate
        | Opcode::CopyFileRange
        | Opcode::SetupMapping => true,
        // An open whose flags cannot be read is refused too.
        Opcode::Open => body
            .clone()
            .read_obj::<OpenIn>()
            .map_or(true, |open| opens_for_writing(open.flags)),
        _ => false,
    }
}
