//! Turning a descriptor chain into a validated [`Request`], before anything executes.
//!
//! Layout (virtio 1.2, 5.2.6): a 16-byte device-readable header, the data, and a device-writable
//! status byte at the end; by byte, not by descriptor (2.7.4, message framing: any descriptor may
//! hold any part, split anywhere). Every guest-controlled number is checked
//! here; a chain that fails comes back as a [`Rejection`] telling where (if anywhere) its status
//! byte may be written.

use std::ops::Deref;

use virtio_bindings::virtio_blk::*;
use virtio_queue::{DescriptorChain, desc::split::Descriptor};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend};

use super::device::{BlkDevice, DISCARD_SECTORS_MAX, DISCARD_SEG_MAX, SECTOR_SIZE, SEG_MAX};

/// Bytes of the request header (`struct virtio_blk_outhdr`).
const HEADER_SIZE: u32 = 16;
/// Bytes of one discard or write-zeroes range (`struct virtio_blk_discard_write_zeroes`).
const RANGE_SIZE: u32 = 16;

/// The request types vbmq serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestType {
    /// `VIRTIO_BLK_T_IN`: read.
    In,
    /// `VIRTIO_BLK_T_OUT`: write.
    Out,
    /// `VIRTIO_BLK_T_FLUSH`.
    Flush,
    /// `VIRTIO_BLK_T_GET_ID`: the serial.
    GetId,
    /// `VIRTIO_BLK_T_DISCARD`.
    Discard,
    /// `VIRTIO_BLK_T_WRITE_ZEROES`.
    WriteZeroes,
}

/// A byte range of the disk, for discard and write-zeroes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// Byte offset on the disk.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Write-zeroes may deallocate.
    pub unmap: bool,
}

/// A request whose every address and range has been checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// What the guest asks, with what that needs.
    pub payload: Payload,
    /// Where the status byte goes.
    pub status: GuestAddress,
}

/// What a request asks, each kind with its own arguments. The iovecs and ranges are in the
/// caller's buffers given to [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload {
    /// `VIRTIO_BLK_T_IN`: read `data_len` bytes at `offset` into `iov_count` iovecs.
    Read {
        /// Byte offset on the disk.
        offset: u64,
        /// Data bytes.
        data_len: u32,
        /// iovecs filled.
        iov_count: u32,
    },
    /// `VIRTIO_BLK_T_OUT`: write `data_len` bytes at `offset` from `iov_count` iovecs.
    Write {
        /// Byte offset on the disk.
        offset: u64,
        /// Data bytes.
        data_len: u32,
        /// iovecs filled.
        iov_count: u32,
    },
    /// `VIRTIO_BLK_T_FLUSH`.
    Flush,
    /// `VIRTIO_BLK_T_GET_ID`: the serial into a buffer of `data_len` bytes (at least 1).
    GetId {
        /// Buffer bytes.
        data_len: u32,
        /// iovecs filled.
        iov_count: u32,
    },
    /// `VIRTIO_BLK_T_DISCARD` of `ranges` ranges.
    Discard {
        /// Ranges filled.
        ranges: u32,
    },
    /// `VIRTIO_BLK_T_WRITE_ZEROES` of `ranges` ranges.
    WriteZeroes {
        /// Ranges filled.
        ranges: u32,
    },
}

#[cfg(any(test, feature = "test-utils"))]
impl Request {
    /// The request's type.
    pub fn kind(&self) -> RequestType {
        match self.payload {
            Payload::Read { .. } => RequestType::In,
            Payload::Write { .. } => RequestType::Out,
            Payload::Flush => RequestType::Flush,
            Payload::GetId { .. } => RequestType::GetId,
            Payload::Discard { .. } => RequestType::Discard,
            Payload::WriteZeroes { .. } => RequestType::WriteZeroes,
        }
    }

    /// Byte offset on the disk (IN and OUT; 0 otherwise).
    pub fn offset(&self) -> u64 {
        match self.payload {
            Payload::Read { offset, .. } | Payload::Write { offset, .. } => offset,
            _ => 0,
        }
    }

    /// Data bytes (IN, OUT) or the GET_ID buffer length (0 otherwise).
    pub fn data_len(&self) -> u32 {
        match self.payload {
            Payload::Read { data_len, .. }
            | Payload::Write { data_len, .. }
            | Payload::GetId { data_len, .. } => data_len,
            _ => 0,
        }
    }

    /// iovecs filled (IN, OUT, GET_ID; 0 otherwise).
    pub fn iov_count(&self) -> u32 {
        match self.payload {
            Payload::Read { iov_count, .. }
            | Payload::Write { iov_count, .. }
            | Payload::GetId { iov_count, .. } => iov_count,
            _ => 0,
        }
    }

    /// Ranges filled (DISCARD, WRITE_ZEROES; 0 otherwise).
    pub fn range_count(&self) -> u32 {
        match self.payload {
            Payload::Discard { ranges } | Payload::WriteZeroes { ranges } => ranges,
            _ => 0,
        }
    }
}

/// Why a chain was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Empty descriptor chain.
    #[error("empty descriptor chain")]
    EmptyChain,
    /// Descriptor chain cut short: a loop, or a link past its table.
    #[error("descriptor chain cut short: a loop, or a link past its table")]
    BrokenChain,
    /// No device-writable status byte at the end of the chain.
    #[error("no device-writable status byte at the end of the chain")]
    NoStatus,
    /// The chain does not start with 16 device-readable header bytes.
    #[error("the chain does not start with 16 device-readable header bytes")]
    BadHeader,
    /// Unsupported request type given.
    #[error("unsupported request type {0}")]
    Unsupported(u32),
    /// Data descriptor has the wrong direction.
    #[error("data descriptor has the wrong direction")]
    WrongDirection,
    /// Data descriptor is not inside guest memory.
    #[error("data descriptor is not inside guest memory")]
    BadAddress,
    /// More than `SEG_MAX` data segments.
    #[error("more than {SEG_MAX} data segments")]
    TooManySegments,
    /// Data length is not a multiple of 512.
    #[error("data length is not a multiple of 512")]
    Unaligned,
    /// Access beyond the end of the disk.
    #[error("access beyond the end of the disk")]
    OutOfRange,
    /// Write to a read-only disk.
    #[error("write to a read-only disk")]
    ReadOnly,
    /// Bad discard or write-zeroes range list.
    #[error("bad discard or write-zeroes range list")]
    BadRanges,
    /// Reserved flags in a discard or write-zeroes range.
    #[error("reserved flags in a discard or write-zeroes range")]
    BadRangeFlags,
}

impl RequestError {
    /// The status byte the guest gets; every variant is listed so a new one must be mapped.
    pub fn status(&self) -> u8 {
        let status = match self {
            RequestError::Unsupported(_) | RequestError::BadRangeFlags => VIRTIO_BLK_S_UNSUPP,
            RequestError::EmptyChain
            | RequestError::NoStatus
            | RequestError::BrokenChain
            | RequestError::BadHeader
            | RequestError::WrongDirection
            | RequestError::BadAddress
            | RequestError::TooManySegments
            | RequestError::Unaligned
            | RequestError::OutOfRange
            | RequestError::ReadOnly
            | RequestError::BadRanges => VIRTIO_BLK_S_IOERR,
        };
        // The status codes are 0, 1 and 2.
        u8::try_from(status).unwrap_or(1)
    }
}

/// A refused chain: the error, and the status byte's address if the chain has a usable one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub error: RequestError,
    /// Where the status byte may be written, if anywhere.
    pub status: Option<GuestAddress>,
}

fn request_type(code: u32) -> Result<RequestType, RequestError> {
    match code {
        VIRTIO_BLK_T_IN => Ok(RequestType::In),
        VIRTIO_BLK_T_OUT => Ok(RequestType::Out),
        VIRTIO_BLK_T_FLUSH => Ok(RequestType::Flush),
        VIRTIO_BLK_T_GET_ID => Ok(RequestType::GetId),
        VIRTIO_BLK_T_DISCARD => Ok(RequestType::Discard),
        VIRTIO_BLK_T_WRITE_ZEROES => Ok(RequestType::WriteZeroes),
        other => Err(RequestError::Unsupported(other)),
    }
}

/// Bytes of the longest discard or write-zeroes range list.
const RANGES_MAX: usize = (RANGE_SIZE * DISCARD_SEG_MAX) as usize;

fn decode_header(raw: &[u8; 16]) -> virtio_blk_outhdr {
    let word = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    virtio_blk_outhdr {
        type_: word(0),
        ioprio: word(4),
        sector: u64::from(word(8)) | u64::from(word(12)) << 32,
    }
}

/// Walks the chain as one run of bytes (virtio 1.x message framing: any descriptor may hold any
/// part of the request): the first 16 driver-readable bytes are the header, then the data or
/// range list; device-writable bytes follow, the last one being the status. The header, the
/// ranges and the data are gathered by byte range into the caller's buffers, never allocating.
struct Body<'a, M> {
    mem: &'a M,
    /// Header bytes gathered so far.
    header: [u8; 16],
    header_len: u32,
    /// The request type, once the header is complete.
    kind: Option<RequestType>,
    /// A device-writable descriptor has been seen: readable bytes may no longer follow.
    writable_seen: bool,
    iov: &'a mut [libc::iovec],
    iov_count: usize,
    data_len: u32,
    /// The discard or write-zeroes range list, gathered by byte.
    ranges: [u8; RANGES_MAX],
    ranges_len: usize,
    ranges_overflow: bool,
    error: Option<RequestError>,
}

impl<M: GuestMemoryBackend> Body<'_, M> {
    fn add(&mut self, addr: GuestAddress, len: u32, writable: bool) {
        if self.error.is_none()
            && let Err(e) = self.try_add(addr, len, writable)
        {
            self.error = Some(e);
        }
    }

    fn try_add(
        &mut self,
        addr: GuestAddress,
        len: u32,
        writable: bool,
    ) -> Result<(), RequestError> {
        let (mut addr, mut len) = (addr, len);
        if self.header_len < HEADER_SIZE {
            if writable {
                return Err(RequestError::BadHeader);
            }
            let take = len.min(HEADER_SIZE - self.header_len);
            let at = self.header_len as usize;
            if take == HEADER_SIZE {
                // The common layout: one 16-byte header descriptor.
                self.header = self
                    .mem
                    .read_obj(addr)
                    .map_err(|_| RequestError::BadAddress)?;
            } else {
                self.mem
                    .read_slice(&mut self.header[at..at + take as usize], addr)
                    .map_err(|_| RequestError::BadAddress)?;
            }
            self.header_len += take;
            if self.header_len == HEADER_SIZE {
                self.kind = Some(request_type(decode_header(&self.header).type_)?);
            }
            len -= take;
            if len == 0 {
                return Ok(());
            }
            addr = addr
                .checked_add(u64::from(take))
                .ok_or(RequestError::BadAddress)?;
        }
        let kind = self.kind.ok_or(RequestError::BadHeader)?;
        // FLUSH carries no data; a driver that sends some is ignored, as QEMU does.
        if kind == RequestType::Flush {
            return Ok(());
        }
        // Driver-readable bytes all come before device-writable ones.
        if writable {
            self.writable_seen = true;
        } else if self.writable_seen {
            return Err(RequestError::WrongDirection);
        }
        let device_writes = matches!(kind, RequestType::In | RequestType::GetId);
        if writable != device_writes {
            return Err(RequestError::WrongDirection);
        }
        match kind {
            RequestType::In | RequestType::Out | RequestType::GetId => {
                if len == 0 {
                    return Ok(());
                }
                let slot = self
                    .iov
                    .get_mut(self.iov_count)
                    .ok_or(RequestError::TooManySegments)?;
                let slice = self
                    .mem
                    .get_slice(addr, len as usize)
                    .map_err(|_| RequestError::BadAddress)?;
                *slot = libc::iovec {
                    iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                    iov_len: len as usize,
                };
                self.iov_count += 1;
                // A chain's total length fits in u32 (the queue iterator stops it otherwise).
                self.data_len = self.data_len.saturating_add(len);
                Ok(())
            }
            RequestType::Discard | RequestType::WriteZeroes => {
                let room = RANGES_MAX - self.ranges_len;
                if len as usize > room {
                    self.ranges_overflow = true;
                    return Ok(());
                }
                let at = self.ranges_len;
                self.mem
                    .read_slice(&mut self.ranges[at..at + len as usize], addr)
                    .map_err(|_| RequestError::BadAddress)?;
                self.ranges_len += len as usize;
                Ok(())
            }
            RequestType::Flush => Ok(()),
        }
    }
}

fn read_ranges(
    device: &BlkDevice,
    kind: RequestType,
    raw: &[u8],
    ranges: &mut [Range],
) -> Result<u32, RequestError> {
    let count = raw.len() / RANGE_SIZE as usize;
    if !raw.len().is_multiple_of(RANGE_SIZE as usize)
        || count == 0
        || count > DISCARD_SEG_MAX as usize
    {
        return Err(RequestError::BadRanges);
    }
    if ranges.len() < count {
        return Err(RequestError::BadRanges);
    }
    let sectors = device.sectors();
    for (raw, out) in raw.chunks_exact(RANGE_SIZE as usize).zip(ranges.iter_mut()) {
        let sector = u64::from_le_bytes(raw[0..8].try_into().map_err(|_| RequestError::BadRanges)?);
        let num = u32::from_le_bytes(raw[8..12].try_into().map_err(|_| RequestError::BadRanges)?);
        let flags = u32::from_le_bytes(
            raw[12..16]
                .try_into()
                .map_err(|_| RequestError::BadRanges)?,
        );
        let unmap = flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0;
        if flags & !VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0
            || (unmap && kind == RequestType::Discard)
        {
            return Err(RequestError::BadRangeFlags);
        }
        if num > DISCARD_SECTORS_MAX {
            return Err(RequestError::BadRanges);
        }
        let end = sector
            .checked_add(u64::from(num))
            .ok_or(RequestError::OutOfRange)?;
        if end > sectors {
            return Err(RequestError::OutOfRange);
        }
        *out = Range {
            offset: sector * SECTOR_SIZE,
            len: u64::from(num) * SECTOR_SIZE,
            unmap,
        };
    }
    u32::try_from(count).map_err(|_| RequestError::BadRanges)
}

/// What a request of `kind` at `sector` asks, checked against the device: the data's length
/// and range for IN and OUT, room for the ID, the discard and write-zeroes ranges.
#[inline(always)]
fn payload<M>(
    kind: RequestType,
    sector: u64,
    body: &Body<'_, M>,
    device: &BlkDevice,
    ranges: &mut [Range],
) -> Result<Payload, RequestError> {
    let data_len = body.data_len;
    let iov_count = u32::try_from(body.iov_count).unwrap_or(u32::MAX);
    Ok(match kind {
        RequestType::In | RequestType::Out => {
            if u64::from(data_len) % SECTOR_SIZE != 0 {
                return Err(RequestError::Unaligned);
            }
            let end = sector
                .checked_mul(SECTOR_SIZE)
                .and_then(|offset| offset.checked_add(u64::from(data_len)))
                .ok_or(RequestError::OutOfRange)?;
            if end > device.capacity() {
                return Err(RequestError::OutOfRange);
            }
            let offset = sector * SECTOR_SIZE;
            if kind == RequestType::In {
                Payload::Read {
                    offset,
                    data_len,
                    iov_count,
                }
            } else {
                Payload::Write {
                    offset,
                    data_len,
                    iov_count,
                }
            }
        }
        // A GET_ID with no room for the ID is refused.
        RequestType::GetId if data_len == 0 => return Err(RequestError::BadAddress),
        RequestType::GetId => Payload::GetId {
            data_len,
            iov_count,
        },
        RequestType::Discard | RequestType::WriteZeroes => {
            let discard = kind == RequestType::Discard;
            if !device.discard {
                return Err(RequestError::Unsupported(if discard {
                    VIRTIO_BLK_T_DISCARD
                } else {
                    VIRTIO_BLK_T_WRITE_ZEROES
                }));
            }
            if body.ranges_overflow {
                return Err(RequestError::BadRanges);
            }
            let raw = &body.ranges[..body.ranges_len];
            let ranges = read_ranges(device, kind, raw, ranges)?;
            if discard {
                Payload::Discard { ranges }
            } else {
                Payload::WriteZeroes { ranges }
            }
        }
        RequestType::Flush => Payload::Flush,
    })
}

/// Parses and validates one chain. IN/OUT data goes to `iov` (at most [`SEG_MAX`] entries are
/// used), discard and write-zeroes ranges to `ranges` (at most [`DISCARD_SEG_MAX`]).
// Inlined into the worker's one call on the per-request path (callgrind on `request_path`: left
// to itself, the compiler sometimes calls it instead, some 47 instructions a request more).
#[inline(always)]
pub fn parse<D, M>(
    chain: DescriptorChain<D>,
    mem: &M,
    device: &BlkDevice,
    iov: &mut [libc::iovec],
    ranges: &mut [Range],
) -> Result<Request, Rejection>
where
    D: Deref<Target = M>,
    M: GuestMemoryBackend,
{
    let iov_limit = iov.len().min(SEG_MAX as usize);
    let mut body = Body {
        mem,
        header: [0; 16],
        header_len: 0,
        kind: None,
        writable_seen: false,
        iov: &mut iov[..iov_limit],
        iov_count: 0,
        data_len: 0,
        ranges: [0; RANGES_MAX],
        ranges_len: 0,
        ranges_overflow: false,
        error: None,
    };
    // The status byte is the chain's last byte: hold each descriptor back until the next
    // arrives, so the last one is known when the chain ends.
    let mut count = 0usize;
    let mut last: Option<Descriptor> = None;
    for desc in chain {
        count += 1;
        if let Some(data) = last.replace(desc) {
            body.add(data.addr(), data.len(), data.is_write_only());
        }
    }
    let broken = |error| {
        Err(Rejection {
            error,
            status: None,
        })
    };
    let Some(last) = last else {
        return broken(RequestError::EmptyChain);
    };
    // A lone descriptor cannot hold both a readable header and a writable status.
    if count < 2 {
        return broken(RequestError::NoStatus);
    }
    // virtio-queue ends a chain silently where it cannot follow it (a loop, a link past its
    // table): a last descriptor that still links on means the chain was cut, not complete.
    if last.has_next() {
        return broken(RequestError::BrokenChain);
    }
    // The status is the chain's last byte; it must be device-writable guest memory.
    let status_at = last
        .addr()
        .checked_add(u64::from(last.len()).saturating_sub(1));
    let status = match status_at {
        Some(addr) if last.is_write_only() && last.len() >= 1 && mem.get_slice(addr, 1).is_ok() => {
            addr
        }
        _ => return broken(RequestError::NoStatus),
    };
    let reject = |error| Rejection {
        error,
        status: Some(status),
    };
    // The last descriptor's bytes before the status: data for requests the device writes data
    // into (IN, GET_ID), padding otherwise (as QEMU reads it).
    if last.len() > 1 && matches!(body.kind, Some(RequestType::In | RequestType::GetId)) {
        body.add(last.addr(), last.len() - 1, true);
    }
    if let Some(error) = body.error {
        return Err(reject(error));
    }
    let Some(kind) = body.kind else {
        return Err(reject(RequestError::BadHeader));
    };
    let header = decode_header(&body.header);
    let writes = matches!(
        kind,
        RequestType::Out | RequestType::Discard | RequestType::WriteZeroes
    );
    if device.readonly && writes {
        return Err(reject(RequestError::ReadOnly));
    }
    let payload = payload(kind, header.sector, &body, device, ranges).map_err(reject)?;
    let request = Request { payload, status };
    Ok(request)
}
