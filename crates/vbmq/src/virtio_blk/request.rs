//! Turning a descriptor chain into a validated [`Request`], before anything executes.
//!
//! Layout (virtio 1.2, 5.2.6): a 16-byte device-readable header, data descriptors, and a
//! device-writable status byte in the last descriptor. Every guest-controlled number is checked
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
    /// What the guest asks.
    pub kind: RequestType,
    /// Byte offset on the disk (IN and OUT).
    pub offset: u64,
    /// Data bytes (IN, OUT) or the GET_ID buffer length.
    pub data_len: u32,
    /// iovecs filled in the caller's buffer (IN, OUT).
    pub iov_count: u32,
    /// Ranges filled in the caller's buffer (DISCARD, WRITE_ZEROES).
    pub range_count: u32,
    /// The GET_ID buffer.
    pub id_addr: GuestAddress,
    /// Where the status byte goes.
    pub status: GuestAddress,
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
    /// Status descriptor longer than one byte.
    #[error("status descriptor longer than one byte")]
    LongStatus,
    /// No device-writable status byte at the end of the chain.
    #[error("no device-writable status byte at the end of the chain")]
    NoStatus,
    /// Header descriptor is not 16 device-readable bytes.
    #[error("header descriptor is not 16 device-readable bytes")]
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
            | RequestError::LongStatus
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

fn read_header<M: GuestMemoryBackend>(
    mem: &M,
    desc: &Descriptor,
) -> Result<virtio_blk_outhdr, RequestError> {
    if desc.is_write_only() || desc.len() != HEADER_SIZE {
        return Err(RequestError::BadHeader);
    }
    let raw: [u8; 16] = mem
        .read_obj(desc.addr())
        .map_err(|_| RequestError::BadAddress)?;
    let word = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
    Ok(virtio_blk_outhdr {
        type_: word(0),
        ioprio: word(4),
        sector: u64::from(word(8)) | u64::from(word(12)) << 32,
    })
}

/// Collects data descriptors as the chain is walked.
struct Body<'a, M> {
    mem: &'a M,
    kind: RequestType,
    iov: &'a mut [libc::iovec],
    iov_count: usize,
    data_len: u32,
    /// The only data descriptor of GET_ID, DISCARD and WRITE_ZEROES.
    single: Option<Descriptor>,
    error: Option<RequestError>,
}

impl<M: GuestMemoryBackend> Body<'_, M> {
    fn add(&mut self, desc: Descriptor) {
        if self.error.is_none()
            && let Err(e) = self.try_add(desc)
        {
            self.error = Some(e);
        }
    }

    fn try_add(&mut self, desc: Descriptor) -> Result<(), RequestError> {
        let device_writes = matches!(self.kind, RequestType::In | RequestType::GetId);
        if desc.is_write_only() != device_writes {
            return Err(RequestError::WrongDirection);
        }
        match self.kind {
            RequestType::In | RequestType::Out => {
                if desc.len() == 0 {
                    return Ok(());
                }
                let slot = self
                    .iov
                    .get_mut(self.iov_count)
                    .ok_or(RequestError::TooManySegments)?;
                let slice = self
                    .mem
                    .get_slice(desc.addr(), desc.len() as usize)
                    .map_err(|_| RequestError::BadAddress)?;
                *slot = libc::iovec {
                    iov_base: slice.ptr_guard_mut().as_ptr().cast(),
                    iov_len: desc.len() as usize,
                };
                self.iov_count += 1;
                // A chain's total length fits in u32 (the queue iterator stops it otherwise).
                self.data_len = self.data_len.saturating_add(desc.len());
                Ok(())
            }
            RequestType::GetId | RequestType::Discard | RequestType::WriteZeroes => {
                if self.single.replace(desc).is_some() {
                    return Err(RequestError::TooManySegments);
                }
                self.data_len = desc.len();
                Ok(())
            }
            // FLUSH carries no data; a driver that sends some is ignored, as QEMU does.
            RequestType::Flush => Ok(()),
        }
    }
}

fn read_ranges<M: GuestMemoryBackend>(
    mem: &M,
    device: &BlkDevice,
    kind: RequestType,
    desc: Option<Descriptor>,
    ranges: &mut [Range],
) -> Result<u32, RequestError> {
    let desc = desc.ok_or(RequestError::BadRanges)?;
    let count = desc.len() / RANGE_SIZE;
    if desc.len() % RANGE_SIZE != 0 || count == 0 || count > DISCARD_SEG_MAX {
        return Err(RequestError::BadRanges);
    }
    let sectors = device.sectors();
    for (i, out) in ranges.iter_mut().take(count as usize).enumerate() {
        let addr = desc
            .addr()
            .checked_add(i as u64 * u64::from(RANGE_SIZE))
            .ok_or(RequestError::BadAddress)?;
        let raw: [u8; 16] = mem.read_obj(addr).map_err(|_| RequestError::BadAddress)?;
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
    if ranges.len() < count as usize {
        return Err(RequestError::BadRanges);
    }
    Ok(count)
}

/// Parses and validates one chain. IN/OUT data goes to `iov` (at most [`SEG_MAX`] entries are
/// used), discard and write-zeroes ranges to `ranges` (at most [`DISCARD_SEG_MAX`]).
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
    let mut descs = chain;
    let Some(first) = descs.next() else {
        return Err(Rejection {
            error: RequestError::EmptyChain,
            status: None,
        });
    };
    let header = read_header(mem, &first);
    let kind = header.and_then(|h| request_type(h.type_));
    let iov_limit = iov.len().min(SEG_MAX as usize);
    let mut body = Body {
        mem,
        kind: *kind.as_ref().unwrap_or(&RequestType::Flush),
        iov: &mut iov[..iov_limit],
        iov_count: 0,
        data_len: 0,
        single: None,
        error: kind.err(),
    };
    // The status byte is the last descriptor: hold each one back until the next arrives.
    let mut last = None;
    for desc in descs {
        if let Some(data) = last.replace(desc) {
            body.add(data);
        }
    }
    let broken = |error| {
        Err(Rejection {
            error,
            status: None,
        })
    };
    let Some(last) = last else {
        return broken(RequestError::NoStatus);
    };
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
    if let Some(error) = body.error {
        return Err(reject(error));
    }
    // A longer last descriptor holds data before its status byte (virtio's any-layout, as
    // QEMU reads it). For requests the device writes data into, no driver does that and the
    // data length would be odd: refused. Otherwise the bytes before the status are padding.
    if last.len() > 1 && matches!(body.kind, RequestType::In | RequestType::GetId) {
        return Err(reject(RequestError::LongStatus));
    }
    let kind = body.kind;
    let writes = matches!(
        kind,
        RequestType::Out | RequestType::Discard | RequestType::WriteZeroes
    );
    if device.readonly && writes {
        return Err(reject(RequestError::ReadOnly));
    }
    let mut request = Request {
        kind,
        offset: 0,
        data_len: body.data_len,
        iov_count: u32::try_from(body.iov_count).unwrap_or(u32::MAX),
        range_count: 0,
        id_addr: GuestAddress(0),
        status,
    };
    match kind {
        RequestType::In | RequestType::Out => {
            let sector = header.map(|h| h.sector).map_err(reject)?;
            if u64::from(request.data_len) % SECTOR_SIZE != 0 {
                return Err(reject(RequestError::Unaligned));
            }
            let end = sector
                .checked_mul(SECTOR_SIZE)
                .and_then(|offset| offset.checked_add(u64::from(request.data_len)))
                .ok_or(reject(RequestError::OutOfRange))?;
            if end > device.geometry.capacity {
                return Err(reject(RequestError::OutOfRange));
            }
            request.offset = sector * SECTOR_SIZE;
        }
        RequestType::GetId => {
            let desc = body.single.ok_or(reject(RequestError::BadAddress))?;
            request.id_addr = desc.addr();
        }
        RequestType::Discard | RequestType::WriteZeroes => {
            if !device.discard {
                return Err(reject(RequestError::Unsupported(match kind {
                    RequestType::Discard => VIRTIO_BLK_T_DISCARD,
                    _ => VIRTIO_BLK_T_WRITE_ZEROES,
                })));
            }
            request.range_count =
                read_ranges(mem, device, kind, body.single, ranges).map_err(reject)?;
        }
        RequestType::Flush => {}
    }
    Ok(request)
}
