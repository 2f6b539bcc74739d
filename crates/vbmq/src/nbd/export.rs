//! What the server serves ([`Export`]), the largest request, and how a connection ends: shared
//! by the handshake (`server`) and the transmission.

use super::meta_context::DirtyBitmap;
use super::wire::errno;

/// The largest read a client may ask for, and so the most memory a connection holds
/// (QEMU's `NBD_MAX_BUFFER_SIZE`).
pub const MAX_REQUEST: u32 = 32 << 20;

/// What an export offers the server: a read-only point-in-time export answers reads, trims
/// and allocation; a writable one (a disk that receives a mirror) writes too.
pub trait Export: Send + Sync {
    /// Its size in bytes.
    fn size(&self) -> u64;
    /// The unit of [`Export::trim`] and of allocation (a power of two).
    fn block_size(&self) -> u32;
    /// Fills `buf` from `offset` (within the size). An error is an `NBD_E*` value.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), u32>;
    /// The client has read `[offset, offset + len)` (within the size) and will not again.
    fn trim(&self, offset: u64, len: u64) -> Result<(), u32>;
    /// `base:allocation` from `offset`: extents as (length, `HOLE`/`ZERO` bits), covering at
    /// least one byte and at most `len`, `max` extents at most.
    fn allocation(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u32, u32)>, u32>;
    /// The changed-block maps frozen at the export's instant, each a `qemu:dirty-bitmap:NAME`
    /// context.
    fn dirty_bitmaps(&self) -> &[DirtyBitmap] {
        &[]
    }
    /// Whether clients may write: then [`Export::trim`] discards, and the writes below are
    /// served.
    fn writable(&self) -> bool {
        false
    }
    /// Writes `data` at `offset` (within the size).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), u32> {
        let _ = (offset, data);
        Err(errno::EPERM)
    }
    /// Zeroes `[offset, offset + len)` (within the size), deallocating it if `unmap`.
    fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<(), u32> {
        let _ = (offset, len, unmap);
        Err(errno::EPERM)
    }
    /// Makes every write answered so far durable.
    fn flush(&self) -> Result<(), u32> {
        Ok(())
    }
    /// A client enters transmission: `Err` says why it may not (another is in it, on an export
    /// that takes one at a time). [`Export::detach`] follows an `Ok` once every request of
    /// that client has been answered or dropped.
    fn attach(&self) -> Result<(), &'static str> {
        Ok(())
    }
    /// The client attached last is gone, with everything it sent.
    fn detach(&self) {}
}

/// How the connection ended, for the log.
#[derive(Debug)]
pub enum End {
    /// The client said so (`NBD_OPT_ABORT`, `NBD_CMD_DISC`) or closed the connection.
    Client,
    /// The client broke the protocol: why.
    Protocol(&'static str),
}
