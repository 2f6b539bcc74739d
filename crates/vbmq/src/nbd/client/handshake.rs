//! The client's side of the fixed newstyle handshake: the hello, `NBD_OPT_STARTTLS` when the
//! server requires TLS, and `NBD_OPT_GO` for one export by name, asking for its block size
//! constraints. Every reply is untrusted: lengths are bounded before
//! anything is allocated, and a server that breaks the protocol ends the handshake with an
//! error.

use std::io::{Read, Write};

use super::ClientError;
use crate::nbd::wire::{self, OptionHeader, flag, handshake, info, opt, rep};

/// The longest option reply accepted; a longer one ends the handshake.
const MAX_REPLY: u32 = 64 << 10;
/// Replies to one `GO` before its `ACK`; more ends the handshake.
const MAX_REPLIES: usize = 64;
/// The largest request this client sends (QEMU's `NBD_MAX_BUFFER_SIZE`), whatever the
/// server offers: the most memory one read's reply takes.
pub const MAX_REQUEST: u32 = 32 << 20;
/// The oldstyle handshake's second magic, refused.
const OLDSTYLE_MAGIC: u64 = 0x0000_4202_8186_1253;

/// What the server says of its export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Its size in bytes.
    pub size: u64,
    /// Its transmission flags (`NBD_FLAG_*`).
    pub flags: u16,
    /// The smallest unit of a request's offset and length (a power of two).
    pub min_block: u32,
    /// The unit that needs no read-modify-write on the server.
    pub preferred_block: u32,
    /// The longest request, never more than [`MAX_REQUEST`].
    pub max_request: u32,
}

impl ExportInfo {
    /// The export takes no writes.
    pub fn read_only(&self) -> bool {
        self.flags & flag::READ_ONLY != 0
    }

    /// The export has `flag` (`NBD_FLAG_SEND_*`).
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// The server's hello and the client's flags.
pub fn hello<S: Read + Write>(stream: &mut S) -> Result<(), ClientError> {
    let mut hello = [0; 18];
    stream.read_exact(&mut hello)?;
    if u64::from_be_bytes(array(&hello[0..8])) != wire::NBD_MAGIC {
        return Err(ClientError::Protocol("not an NBD server (no NBDMAGIC)"));
    }
    match u64::from_be_bytes(array(&hello[8..16])) {
        wire::IHAVEOPT => {}
        OLDSTYLE_MAGIC => return Err(ClientError::Protocol("oldstyle handshake: not supported")),
        _ => return Err(ClientError::Protocol("bad handshake magic")),
    }
    let server = u16::from_be_bytes(array(&hello[16..18]));
    if server & handshake::FIXED_NEWSTYLE == 0 {
        return Err(ClientError::Protocol("the server has no fixed newstyle"));
    }
    let client = handshake::FIXED_NEWSTYLE | (server & handshake::NO_ZEROES);
    stream.write_all(&u32::from(client).to_be_bytes())?;
    Ok(())
}

/// `NBD_OPT_GO` for export `name`, after the hello (and `STARTTLS`); on success the stream is
/// in transmission.
pub fn go<S: Read + Write>(stream: &mut S, name: &str) -> Result<ExportInfo, ClientError> {
    if name.len() > wire::MAX_NAME {
        return Err(ClientError::Invalid("export name longer than 4096 bytes"));
    }
    send_go(stream, name)?;
    receive_go(stream)
}

/// `NBD_OPT_STARTTLS`, after the hello: `Ok` once the server acknowledged it (TLS begins).
pub fn starttls<S: Read + Write>(stream: &mut S) -> Result<(), ClientError> {
    let header = OptionHeader {
        magic: wire::IHAVEOPT,
        option: opt::STARTTLS,
        length: 0,
    };
    stream.write_all(&header.encode())?;
    let mut reply = [0; 20];
    stream.read_exact(&mut reply)?;
    if u64::from_be_bytes(array(&reply[0..8])) != wire::OPTION_REPLY_MAGIC {
        return Err(ClientError::Protocol("bad option reply magic"));
    }
    if u32::from_be_bytes(array(&reply[8..12])) != opt::STARTTLS {
        return Err(ClientError::Protocol("a reply to an option not sent"));
    }
    let kind = u32::from_be_bytes(array(&reply[12..16]));
    let length = u32::from_be_bytes(array(&reply[16..20]));
    if length > MAX_REPLY {
        return Err(ClientError::Protocol("option reply too long"));
    }
    let mut data = vec![0; length as usize];
    stream.read_exact(&mut data)?;
    match kind {
        rep::ACK if data.is_empty() => Ok(()),
        kind if kind & rep::ERROR != 0 => Err(ClientError::Refused {
            kind,
            message: String::from_utf8_lossy(&data).chars().take(200).collect(),
        }),
        _ => Err(ClientError::Protocol("unexpected reply to STARTTLS")),
    }
}

fn send_go<S: Write>(stream: &mut S, name: &str) -> Result<(), ClientError> {
    // Checked by the caller: at most MAX_NAME bytes.
    let name_len = u32::try_from(name.len()).unwrap_or(u32::MAX);
    let mut data = Vec::with_capacity(8 + name.len());
    data.extend_from_slice(&name_len.to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    let header = OptionHeader {
        magic: wire::IHAVEOPT,
        option: opt::GO,
        length: name_len + 8,
    };
    let mut out = header.encode().to_vec();
    out.extend_from_slice(&data);
    stream.write_all(&out)?;
    Ok(())
}

/// Sizes as the server gave them: minimum, preferred, maximum.
type BlockSizes = (u32, u32, u32);

fn receive_go<S: Read>(stream: &mut S) -> Result<ExportInfo, ClientError> {
    let mut export = None;
    // The protocol's defaults when the server gives no sizes.
    let mut sizes: BlockSizes = (1, 4096, MAX_REQUEST);
    for _ in 0..MAX_REPLIES {
        let mut header = [0; 20];
        stream.read_exact(&mut header)?;
        if u64::from_be_bytes(array(&header[0..8])) != wire::OPTION_REPLY_MAGIC {
            return Err(ClientError::Protocol("bad option reply magic"));
        }
        if u32::from_be_bytes(array(&header[8..12])) != opt::GO {
            return Err(ClientError::Protocol("a reply to an option not sent"));
        }
        let kind = u32::from_be_bytes(array(&header[12..16]));
        let length = u32::from_be_bytes(array(&header[16..20]));
        if length > MAX_REPLY {
            return Err(ClientError::Protocol("option reply too long"));
        }
        let mut data = vec![0; length as usize];
        stream.read_exact(&mut data)?;
        match kind {
            rep::ACK => {
                let (size, flags) =
                    export.ok_or(ClientError::Protocol("GO acknowledged with no export info"))?;
                return export_info(size, flags, sizes);
            }
            rep::INFO => match info_item(&data)? {
                Info::Export(size, flags) => export = Some((size, flags)),
                Info::BlockSizes(s) => sizes = s,
                Info::Other => {}
            },
            kind if kind & rep::ERROR != 0 => {
                // A message for a human: its first line, short.
                let message: String = String::from_utf8_lossy(&data).chars().take(200).collect();
                return Err(ClientError::Refused { kind, message });
            }
            _ => return Err(ClientError::Protocol("unexpected reply to GO")),
        }
    }
    Err(ClientError::Protocol("too many replies to GO"))
}

enum Info {
    Export(u64, u16),
    BlockSizes(BlockSizes),
    Other,
}

fn info_item(data: &[u8]) -> Result<Info, ClientError> {
    if data.len() < 2 {
        return Err(ClientError::Protocol("INFO reply too short"));
    }
    match (u16::from_be_bytes(array(&data[0..2])), data.len()) {
        (info::EXPORT, 12) => Ok(Info::Export(
            u64::from_be_bytes(array(&data[2..10])),
            u16::from_be_bytes(array(&data[10..12])),
        )),
        (info::BLOCK_SIZE, 14) => Ok(Info::BlockSizes((
            u32::from_be_bytes(array(&data[2..6])),
            u32::from_be_bytes(array(&data[6..10])),
            u32::from_be_bytes(array(&data[10..14])),
        ))),
        (info::EXPORT | info::BLOCK_SIZE, _) => {
            Err(ClientError::Protocol("INFO reply of the wrong length"))
        }
        _ => Ok(Info::Other),
    }
}

/// Checks what the server said against the protocol's rules on sizes.
fn export_info(size: u64, flags: u16, sizes: BlockSizes) -> Result<ExportInfo, ClientError> {
    let (min, preferred, max) = sizes;
    if flags & flag::HAS_FLAGS == 0 {
        return Err(ClientError::Protocol(
            "transmission flags without HAS_FLAGS",
        ));
    }
    if size > i64::MAX as u64 {
        return Err(ClientError::Protocol("export size past 2^63"));
    }
    if !min.is_power_of_two() || min > 64 << 10 {
        return Err(ClientError::Protocol(
            "minimum block size not a power of two <= 64 KiB",
        ));
    }
    if !preferred.is_power_of_two() || preferred < min {
        return Err(ClientError::Protocol(
            "preferred block size not a power of two >= minimum",
        ));
    }
    if max < min || (max != u32::MAX && !max.is_multiple_of(min)) {
        return Err(ClientError::Protocol(
            "maximum block size not a multiple of the minimum",
        ));
    }
    // The longest request: the server's maximum, cut to ours and to a multiple of its minimum.
    let max_request = max.min(MAX_REQUEST) / min * min;
    Ok(ExportInfo {
        size,
        flags,
        min_block: min,
        preferred_block: preferred,
        max_request,
    })
}

/// A fixed-size array from a slice of exactly its length (the callers slice constant ranges).
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(s);
    a
}
