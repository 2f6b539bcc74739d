//! One client's connection: the fixed newstyle handshake, then transmission, against an
//! [`Export`]. Everything the client sends is checked before use; a client that breaks the
//! framing is disconnected, one that asks for something wrong gets the error the protocol
//! names and the connection goes on.

use std::io::{self, Read, Write};

pub use super::export::{End, Export, MAX_REQUEST};
use super::meta_context::{self, Context, DirtyBitmap};
use super::transmission::{self, Settled};
use super::wire::{self, OptionHeader, flag, handshake, info, opt, rep};

/// The largest option data accepted; a longer option ends the connection.
const MAX_OPTION: u32 = 64 << 10;
/// The longest export name or metadata context query (QEMU's `NBD_MAX_STRING_SIZE`).
const MAX_STRING: u32 = 4096;
/// Options a client may send before transmission.
const MAX_OPTIONS: u32 = 256;

/// Serves one connection until it ends. Once the handshake is over, `transmission` is called
/// on the stream and gives a second handle writing to the same connection (replies are
/// written by the export's workers while the stream reads the next requests).
/// `io::Error`: the connection failed (a client gone mid-reply is one).
pub fn serve<S: Read + Write, W: Write + Send>(
    stream: &mut S,
    export: &dyn Export,
    transmission: impl FnOnce(&mut S) -> io::Result<W>,
) -> io::Result<End> {
    serve_greeted(stream, export, None, transmission)
}

/// As [`serve`], on a connection whose hello is over and whose options go on inside TLS
/// (`Some`: the client's flags, as [`super::tls::accept`] read them before `STARTTLS`).
pub fn serve_greeted<S: Read + Write, W: Write + Send>(
    stream: &mut S,
    export: &dyn Export,
    tls_flags: Option<u32>,
    transmission: impl FnOnce(&mut S) -> io::Result<W>,
) -> io::Result<End> {
    let mut conn = Connection {
        stream,
        export,
        structured: false,
        contexts: Vec::new(),
        no_zeroes: false,
        tls: tls_flags.is_some(),
        attached: None,
    };
    match conn.negotiate(tls_flags)? {
        Negotiated::Transmission => {
            let writer = transmission(conn.stream)?;
            let settled = Settled {
                structured: conn.structured,
                contexts: conn.contexts,
            };
            // Detached (`conn.attached` dropped) once every request read is answered.
            transmission::serve(conn.stream, writer, export, settled)
        }
        Negotiated::Ended(end) => Ok(end),
    }
}

enum Negotiated {
    Transmission,
    Ended(End),
}

struct Connection<'a, S> {
    stream: &'a mut S,
    export: &'a dyn Export,
    structured: bool,
    /// The metadata contexts selected (`SET_META_CONTEXT`), each once.
    contexts: Vec<Context>,
    no_zeroes: bool,
    /// The connection is inside TLS.
    tls: bool,
    /// Set when the client enters transmission: the export is its until this drops.
    attached: Option<Attached<'a>>,
}

/// A client in transmission, as the export counts it (see [`Export::attach`]).
struct Attached<'a>(&'a dyn Export);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// A client's bytes, read from in order, every length checked.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A string of a 32-bit length, [`MAX_STRING`] at most.
    fn string(&mut self) -> Option<&'a [u8]> {
        let len = self.u32().filter(|&l| l <= MAX_STRING)?;
        self.take(len as usize)
    }
}

/// An option the server answers with an error reply: its type and a message.
type Refusal = (u32, &'static str);

impl<S: Read + Write> Connection<'_, S> {
    fn transmission_flags(&self) -> u16 {
        // Multi-conn on a read-only view only, the same on every connection: a writable
        // export takes one client at a time (see `Export::attach`).
        let mut flags = flag::HAS_FLAGS | flag::SEND_FLUSH | flag::SEND_TRIM;
        flags |= if self.export.writable() {
            flag::SEND_FUA | flag::SEND_WRITE_ZEROES
        } else {
            flag::READ_ONLY | flag::CAN_MULTI_CONN
        };
        if self.structured {
            flags |= flag::SEND_DF;
        }
        flags
    }

    /// The client enters transmission, if the export takes it.
    fn attach(&mut self) -> Result<(), &'static str> {
        self.export.attach()?;
        self.attached = Some(Attached(self.export));
        Ok(())
    }

    /// The hello (unless TLS began after it: `tls_flags`), then the options.
    fn negotiate(&mut self, tls_flags: Option<u32>) -> io::Result<Negotiated> {
        let client = match tls_flags {
            Some(flags) => flags,
            None => self.hello()?,
        };
        let known = u32::from(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES);
        if client & !known != 0 {
            return Ok(Negotiated::Ended(End::Protocol("unknown client flags")));
        }
        if client & u32::from(handshake::FIXED_NEWSTYLE) == 0 {
            return Ok(Negotiated::Ended(End::Protocol("not fixed newstyle")));
        }
        self.no_zeroes = client & u32::from(handshake::NO_ZEROES) != 0;
        for _ in 0..MAX_OPTIONS {
            let mut header = [0; OptionHeader::SIZE];
            self.stream.read_exact(&mut header)?;
            let header = OptionHeader::decode(&header);
            if header.magic != wire::IHAVEOPT {
                return Ok(Negotiated::Ended(End::Protocol("bad option magic")));
            }
            if header.length > MAX_OPTION {
                return Ok(Negotiated::Ended(End::Protocol("option data too long")));
            }
            let mut data = vec![0; header.length as usize];
            self.stream.read_exact(&mut data)?;
            if let Some(done) = self.option(header.option, &data)? {
                return Ok(done);
            }
        }
        Ok(Negotiated::Ended(End::Protocol("too many options")))
    }

    /// Sends the server's hello; the client's flags.
    fn hello(&mut self) -> io::Result<u32> {
        let mut hello = Vec::with_capacity(18);
        hello.extend_from_slice(&wire::NBD_MAGIC.to_be_bytes());
        hello.extend_from_slice(&wire::IHAVEOPT.to_be_bytes());
        hello.extend_from_slice(&(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes());
        self.stream.write_all(&hello)?;
        let mut client = [0; 4];
        self.stream.read_exact(&mut client)?;
        Ok(u32::from_be_bytes(client))
    }

    /// Answers one option; `Some` when negotiation is over.
    fn option(&mut self, option: u32, data: &[u8]) -> io::Result<Option<Negotiated>> {
        let answered = match option {
            opt::EXPORT_NAME => {
                if !data.is_empty() {
                    // The protocol has no error reply for this option: only closing.
                    return Ok(Some(Negotiated::Ended(End::Protocol(
                        "unknown export name",
                    ))));
                }
                if let Err(why) = self.attach() {
                    return Ok(Some(Negotiated::Ended(End::Protocol(why))));
                }
                let mut reply = Vec::with_capacity(10 + 124);
                reply.extend_from_slice(&self.export.size().to_be_bytes());
                reply.extend_from_slice(&self.transmission_flags().to_be_bytes());
                if !self.no_zeroes {
                    reply.resize(reply.len() + 124, 0);
                }
                self.stream.write_all(&reply)?;
                return Ok(Some(Negotiated::Transmission));
            }
            opt::ABORT => {
                self.reply(option, rep::ACK, &[])?;
                return Ok(Some(Negotiated::Ended(End::Client)));
            }
            opt::LIST => self.list(option, data)?,
            opt::STARTTLS if self.tls => Err((rep::ERR_INVALID, "TLS is on already")),
            opt::STARTTLS => Err((rep::ERR_POLICY, "TLS is not offered on this socket")),
            opt::INFO | opt::GO => self.info(option, data)?,
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    Err((rep::ERR_INVALID, "STRUCTURED_REPLY takes no data"))
                } else if self.structured {
                    Err((rep::ERR_INVALID, "structured replies are on already"))
                } else {
                    self.structured = true;
                    self.reply(option, rep::ACK, &[])?;
                    Ok(())
                }
            }
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => self.meta_context(option, data)?,
            _ => Err((rep::ERR_UNSUP, "unknown option")),
        };
        match answered {
            Ok(()) if option == opt::GO => Ok(Some(Negotiated::Transmission)),
            Ok(()) => Ok(None),
            Err((kind, message)) => {
                self.reply(option, kind, message.as_bytes())?;
                Ok(None)
            }
        }
    }

    fn reply(&mut self, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
        let mut out = Vec::with_capacity(20 + data.len());
        // Every reply's data is built here from short constants: it fits a u32.
        let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&wire::option_reply(option, kind, length));
        out.extend_from_slice(data);
        self.stream.write_all(&out)
    }

    fn list(&mut self, option: u32, data: &[u8]) -> io::Result<Result<(), Refusal>> {
        if !data.is_empty() {
            return Ok(Err((rep::ERR_INVALID, "LIST takes no data")));
        }
        // One export, the default: an empty name.
        self.reply(option, rep::SERVER, &0u32.to_be_bytes())?;
        self.reply(option, rep::ACK, &[])?;
        Ok(Ok(()))
    }

    fn info(&mut self, option: u32, data: &[u8]) -> io::Result<Result<(), Refusal>> {
        let (wants_name, name) = match info_request(data) {
            Ok(parsed) => parsed,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if !name.is_empty() {
            return Ok(Err((
                rep::ERR_UNKNOWN,
                "the only export is the default (empty name)",
            )));
        }
        if option == opt::GO
            && let Err(why) = self.attach()
        {
            return Ok(Err((rep::ERR_POLICY, why)));
        }
        let mut export = Vec::with_capacity(12);
        export.extend_from_slice(&info::EXPORT.to_be_bytes());
        export.extend_from_slice(&self.export.size().to_be_bytes());
        export.extend_from_slice(&self.transmission_flags().to_be_bytes());
        let mut sizes = Vec::with_capacity(14);
        sizes.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
        sizes.extend_from_slice(&1u32.to_be_bytes());
        sizes.extend_from_slice(&4096u32.to_be_bytes());
        sizes.extend_from_slice(&MAX_REQUEST.to_be_bytes());
        self.reply(option, rep::INFO, &export)?;
        self.reply(option, rep::INFO, &sizes)?;
        if wants_name {
            self.reply(option, rep::INFO, &info::NAME.to_be_bytes())?;
        }
        self.reply(option, rep::ACK, &[])?;
        Ok(Ok(()))
    }

    fn meta_context(&mut self, option: u32, data: &[u8]) -> io::Result<Result<(), Refusal>> {
        let set = option == opt::SET_META_CONTEXT;
        if set && !self.structured {
            return Ok(Err((
                rep::ERR_INVALID,
                "SET_META_CONTEXT needs structured replies",
            )));
        }
        let bitmaps = self.export.dirty_bitmaps();
        let matched = match contexts_request(data, set, bitmaps) {
            Ok(matched) => matched,
            Err(refusal) => return Ok(Err(refusal)),
        };
        for context in &matched {
            let mut reply = context.id().to_be_bytes().to_vec();
            reply.extend_from_slice(context.name(bitmaps).as_bytes());
            self.reply(option, rep::META_CONTEXT, &reply)?;
        }
        if set {
            self.contexts = matched;
        }
        self.reply(option, rep::ACK, &[])?;
        Ok(Ok(()))
    }
}

/// `INFO`/`GO`'s data: whether the client asks for the name, and the export's name.
fn info_request(data: &[u8]) -> Result<(bool, &[u8]), Refusal> {
    let malformed = (rep::ERR_INVALID, "malformed INFO or GO request");
    let mut fields = Fields(data);
    let name = fields.string().ok_or(malformed)?;
    let count = fields.u16().ok_or(malformed)?;
    let mut wants_name = false;
    for _ in 0..count {
        wants_name |= fields.u16().ok_or(malformed)? == info::NAME;
    }
    if !fields.0.is_empty() {
        return Err(malformed);
    }
    Ok((wants_name, name))
}

/// `LIST_META_CONTEXT`/`SET_META_CONTEXT`'s data (`set`: the latter): the contexts of the
/// export its queries name, each once (`LIST` with no query: every one).
fn contexts_request(
    data: &[u8],
    set: bool,
    bitmaps: &[DirtyBitmap],
) -> Result<Vec<Context>, Refusal> {
    let malformed = (rep::ERR_INVALID, "malformed metadata context request");
    let mut fields = Fields(data);
    let name = fields.string().ok_or(malformed)?;
    let count = fields.u32().ok_or(malformed)?;
    let mut matched = if !set && count == 0 {
        meta_context::all(bitmaps)
    } else {
        Vec::new()
    };
    for _ in 0..count {
        let query = fields.string().ok_or(malformed)?;
        meta_context::matching(query, !set, bitmaps, &mut matched);
    }
    if !fields.0.is_empty() {
        return Err(malformed);
    }
    if !name.is_empty() {
        return Err((
            rep::ERR_UNKNOWN,
            "the only export is the default (empty name)",
        ));
    }
    Ok(matched)
}
