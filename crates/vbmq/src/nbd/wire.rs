//! The NBD wire format (the NetworkBlockDevice project's `doc/proto.md`): the magic numbers,
//! the option and command codes, and the fixed-size headers of both directions, encoded and
//! decoded in one place so that a client (a mirror, `base=nbd`) and the server share them.
//! Everything is big-endian.

/// `NBDMAGIC`: the server's first eight bytes.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle negotiation, and the magic of every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// The magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags (server) and client flags.
pub mod handshake {
    /// Fixed newstyle negotiation.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// No 124 bytes of zeros after `NBD_OPT_EXPORT_NAME`.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Option codes (`NBD_OPT_*`).
pub mod opt {
    /// Choose an export by name and enter transmission (the old way).
    pub const EXPORT_NAME: u32 = 1;
    /// End negotiation.
    pub const ABORT: u32 = 2;
    /// The exports.
    pub const LIST: u32 = 3;
    /// Start TLS.
    pub const STARTTLS: u32 = 5;
    /// An export's details.
    pub const INFO: u32 = 6;
    /// An export's details, then transmission.
    pub const GO: u32 = 7;
    /// Structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// The metadata contexts matching queries.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Select metadata contexts for `NBD_CMD_BLOCK_STATUS`.
    pub const SET_META_CONTEXT: u32 = 10;
}

/// Option reply types (`NBD_REP_*`).
pub mod rep {
    /// Done.
    pub const ACK: u32 = 1;
    /// One export, in answer to `LIST`.
    pub const SERVER: u32 = 2;
    /// One item of `INFO`/`GO`.
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    /// The bit of every error reply type.
    pub const ERROR: u32 = 1 << 31;
    /// The option is unknown.
    pub const ERR_UNSUP: u32 = ERROR | 1;
    /// Forbidden by the server's policy.
    pub const ERR_POLICY: u32 = ERROR | 2;
    /// Malformed or out of place.
    pub const ERR_INVALID: u32 = ERROR | 3;
    /// Refused until TLS is on (`NBD_OPT_STARTTLS`).
    pub const ERR_TLS_REQD: u32 = ERROR | 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = ERROR | 6;
    /// The request is too big.
    pub const ERR_TOO_BIG: u32 = ERROR | 9;
}

/// `NBD_INFO_*` item types.
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// The export's name.
    pub const NAME: u16 = 1;
    /// Minimum, preferred and maximum block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (`NBD_FLAG_*`).
pub mod flag {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export is read-only.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_CMD_FLUSH` is understood.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_CMD_FLAG_FUA` is understood.
    pub const SEND_FUA: u16 = 1 << 3;
    /// `NBD_CMD_TRIM` is understood.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_CMD_WRITE_ZEROES` is understood.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `NBD_CMD_FLAG_DF` is understood.
    pub const SEND_DF: u16 = 1 << 7;
    /// Every connection sees the same data: a client may open several.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write (followed by its data).
    pub const WRITE: u16 = 1;
    /// Disconnect.
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim.
    pub const TRIM: u16 = 4;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Block status of the selected metadata contexts.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cmd_flag {
    /// Force unit access.
    pub const FUA: u16 = 1 << 0;
    /// Write zeroes without punching a hole.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Do not fragment a read's reply.
    pub const DF: u16 = 1 << 2;
    /// One extent per context is enough.
    pub const REQ_ONE: u16 = 1 << 3;
}

/// Structured reply chunk types (`NBD_REPLY_TYPE_*`) and flags.
pub mod chunk {
    /// The last chunk of a reply.
    pub const FLAG_DONE: u16 = 1;
    /// Nothing (a reply with no payload).
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// Extents of one metadata context.
    pub const BLOCK_STATUS: u16 = 5;
    /// An error.
    pub const ERROR: u16 = (1 << 15) | 1;
}

/// Error values on the wire (`NBD_E*`).
pub mod errno {
    /// Not permitted (a write to a read-only export, a read of released blocks).
    pub const EPERM: u32 = 1;
    /// I/O error.
    pub const EIO: u32 = 5;
    /// Invalid request.
    pub const EINVAL: u32 = 22;
    /// Not supported.
    pub const ENOTSUP: u32 = 95;
}

/// `base:allocation` state bits.
pub mod allocation {
    /// Not allocated.
    pub const HOLE: u32 = 1 << 0;
    /// Reads as zeros.
    pub const ZERO: u32 = 1 << 1;
}

/// The longest export name a client sends (QEMU's `NBD_MAX_STRING_SIZE`).
pub const MAX_NAME: usize = 4096;

/// The one metadata context every server knows.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// The bytes of an option's header after its magic, as a client sends them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// `IHAVEOPT` when well formed.
    pub magic: u64,
    /// The option code.
    pub option: u32,
    /// The length of the data that follows.
    pub length: u32,
}

impl OptionHeader {
    /// Its size on the wire.
    pub const SIZE: usize = 16;

    /// Reads one from its 16 bytes.
    pub fn decode(b: &[u8; Self::SIZE]) -> Self {
        OptionHeader {
            magic: u64::from_be_bytes(array(&b[0..8])),
            option: u32::from_be_bytes(array(&b[8..12])),
            length: u32::from_be_bytes(array(&b[12..16])),
        }
    }

    /// Its 16 bytes.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0; Self::SIZE];
        b[0..8].copy_from_slice(&self.magic.to_be_bytes());
        b[8..12].copy_from_slice(&self.option.to_be_bytes());
        b[12..16].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// The header of an option reply, whose `length` bytes of data follow.
pub fn option_reply(option: u32, reply: u32, length: u32) -> [u8; 20] {
    let mut b = [0; 20];
    b[0..8].copy_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    b[8..12].copy_from_slice(&option.to_be_bytes());
    b[12..16].copy_from_slice(&reply.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

/// A transmission request's header (a write's data follows it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// `REQUEST_MAGIC` when well formed.
    pub magic: u32,
    /// `NBD_CMD_FLAG_*`.
    pub flags: u16,
    /// `NBD_CMD_*`.
    pub kind: u16,
    /// Echoed in the reply.
    pub cookie: u64,
    /// Where.
    pub offset: u64,
    /// How many bytes.
    pub length: u32,
}

impl Request {
    /// Its size on the wire.
    pub const SIZE: usize = 28;

    /// Reads one from its 28 bytes.
    pub fn decode(b: &[u8; Self::SIZE]) -> Self {
        Request {
            magic: u32::from_be_bytes(array(&b[0..4])),
            flags: u16::from_be_bytes(array(&b[4..6])),
            kind: u16::from_be_bytes(array(&b[6..8])),
            cookie: u64::from_be_bytes(array(&b[8..16])),
            offset: u64::from_be_bytes(array(&b[16..24])),
            length: u32::from_be_bytes(array(&b[24..28])),
        }
    }

    /// Its 28 bytes.
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0; Self::SIZE];
        b[0..4].copy_from_slice(&self.magic.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }
}

/// A simple reply's header (a read's data follows it).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0; 16];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// A structured reply chunk's header, whose `length` bytes of payload follow.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, length: u32) -> [u8; 20] {
    let mut b = [0; 20];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&length.to_be_bytes());
    b
}

/// A fixed-size array from a slice of exactly its length (the callers slice constant ranges of
/// arrays: the length always matches).
fn array<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0; N];
    a.copy_from_slice(s);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let r = Request {
            magic: REQUEST_MAGIC,
            flags: cmd_flag::DF,
            kind: cmd::READ,
            cookie: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        assert_eq!(Request::decode(&r.encode()), r);
        let o = OptionHeader {
            magic: IHAVEOPT,
            option: opt::GO,
            length: 7,
        };
        assert_eq!(OptionHeader::decode(&o.encode()), o);
        assert_eq!(&NBD_MAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
    }
}
