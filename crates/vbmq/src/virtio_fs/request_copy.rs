//! Each request read from guest memory once: its header and every argument are copied into a
//! buffer the queue owns, and the server reads them from there. A guest that rewrites its
//! buffers while the request is served changes nothing (a double fetch otherwise: a request
//! checked as GETATTR and served as SETATTR). Only the data of a WRITE stays in guest memory,
//! read once, by the write itself.

use std::io::Read;

use fuse_backend_rs::abi::fuse_abi::{InHeader, Opcode, WriteIn};
use fuse_backend_rs::api::server::MAX_BUFFER_SIZE;
use fuse_backend_rs::transport::Reader;
use vm_memory::bitmap::RefSlice;
use vm_memory::{ByteValued, VolatileSlice};

use crate::guest::dirty_log::DirtyLog;

/// The largest request the server accepts: `MAX_BUFFER_SIZE` and a page of headers.
pub const MAX_REQUEST: usize = MAX_BUFFER_SIZE as usize + 0x1000;

/// The bitmap slice of guest memory regions (a reader over them and over the copy agree).
pub type Slice<'a> = RefSlice<'a, DirtyLog>;

/// Why a request was not copied.
#[derive(Debug)]
pub enum NotCopied {
    /// Shorter than a header, or its buffers could not be read.
    Unreadable,
    /// More header and arguments than [`MAX_REQUEST`]: answered `ENOMEM`, as the server
    /// answers a header claiming that much.
    TooLarge(InHeader),
}

/// One queue's copy of the request it serves, allocated once.
pub struct RequestCopy {
    bytes: Box<[u8]>,
    /// Bytes of the last request copied (header and arguments).
    len: usize,
    /// The copy is host memory: nothing to log for a migration (and the reader never writes).
    no_log: DirtyLog,
}

impl Default for RequestCopy {
    fn default() -> Self {
        RequestCopy {
            bytes: vec![0; MAX_REQUEST].into_boxed_slice(),
            len: 0,
            no_log: DirtyLog::default(),
        }
    }
}

impl RequestCopy {
    /// Copies the request `guest` reads: its header, then every argument (a WRITE's `WriteIn`
    /// only). Returns the header and the reader the server serves: the copy, then for a WRITE
    /// the data still in guest memory.
    pub fn take<'a>(
        &'a mut self,
        mut guest: Reader<'a, Slice<'a>>,
    ) -> Result<(InHeader, Reader<'a, Slice<'a>>), NotCopied> {
        let header_len = size_of::<InHeader>();
        let (head, rest) = self.bytes.split_at_mut(header_len);
        guest.read_exact(head).map_err(|_| NotCopied::Unreadable)?;
        let mut header = InHeader::default();
        header.as_mut_slice().copy_from_slice(head);
        let available = guest.available_bytes();
        let args_len = if header.opcode == Opcode::Write as u32 {
            available.min(size_of::<WriteIn>())
        } else {
            available
        };
        let args = rest
            .get_mut(..args_len)
            .ok_or(NotCopied::TooLarge(header))?;
        guest.read_exact(args).map_err(|_| NotCopied::Unreadable)?;
        self.len = header_len + args_len;
        let copied = &mut self.bytes[..header_len + args_len];
        // SAFETY: `copied` is host memory borrowed for 'a, as long as the reader holding the
        // slice can live; nothing else reads or writes it meanwhile (`&mut self`).
        let front = unsafe {
            VolatileSlice::with_bitmap(
                copied.as_mut_ptr(),
                copied.len(),
                RefSlice::new(&self.no_log, 0),
                None,
            )
        };
        guest.prepend(front);
        Ok((header, guest))
    }
}

impl RequestCopy {
    /// The arguments of the last request copied (after its header).
    pub fn args(&self) -> &[u8] {
        self.bytes
            .get(size_of::<InHeader>()..self.len)
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[path = "request_copy_tests.rs"]
mod tests;
