//! One client's connection: the fixed newstyle handshake, then transmission, against an
//! [`Export`]. Everything the client sends is checked before use; a client that breaks the
//! framing is disconnected, one that asks for something wrong gets the error the protocol
//! names and the connection goes on.

use std::io::{self, Read, Write};

use super::meta_context::{self, Context, DirtyBitmap};
use super::wire::{
    self, OptionHeader, Request, allocation, chunk, cmd, cmd_flag, errno, flag, handshake, info,
    opt, rep,
};

/// The largest read a client may ask for, and so the most memory a connection holds
/// (QEMU's `NBD_MAX_BUFFER_SIZE`).
pub const MAX_REQUEST: u32 = 32 << 20;
/// The largest option data accepted; a longer option ends the connection.
const MAX_OPTION: u32 = 64 << 10;
/// The longest export name or metadata context query (QEMU's `NBD_MAX_STRING_SIZE`).
const MAX_STRING: u32 = 4096;
/// Options a client may send before transmission.
const MAX_OPTIONS: u32 = 256;
/// Extents in one block status reply, per context.
const MAX_EXTENTS: usize = 4096;

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
}

/// How the connection ended, for the log.
#[derive(Debug)]
pub enum End {
    /// The client said so (`NBD_OPT_ABORT`, `NBD_CMD_DISC`) or closed the connection.
    Client,
    /// The client broke the protocol: why.
    Protocol(&'static str),
}

/// Serves one connection until it ends; `transmission` is called on the stream once the
/// handshake is over. `io::Error`: the connection failed (a client gone mid-reply is one).
pub fn serve<S: Read + Write>(
    stream: &mut S,
    export: &dyn Export,
    transmission: impl FnOnce(&mut S),
) -> io::Result<End> {
    serve_greeted(stream, export, None, transmission)
}

/// As [`serve`], on a connection whose hello is over and whose options go on inside TLS
/// (`Some`: the client's flags, as [`super::tls::accept`] read them before `STARTTLS`).
pub fn serve_greeted<S: Read + Write>(
    stream: &mut S,
    export: &dyn Export,
    tls_flags: Option<u32>,
    transmission: impl FnOnce(&mut S),
) -> io::Result<End> {
    let mut conn = Connection {
        stream,
        export,
        structured: false,
        contexts: Vec::new(),
        no_zeroes: false,
        tls: tls_flags.is_some(),
        buffer: Vec::new(),
    };
    match conn.negotiate(tls_flags)? {
        Negotiated::Transmission => {
            transmission(conn.stream);
            conn.transmission()
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
    /// Reused for every read (up to [`MAX_REQUEST`]).
    buffer: Vec<u8>,
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
        let mut flags = flag::HAS_FLAGS | flag::SEND_FLUSH | flag::SEND_TRIM | flag::CAN_MULTI_CONN;
        flags |= if self.export.writable() {
            flag::SEND_FUA | flag::SEND_WRITE_ZEROES
        } else {
            flag::READ_ONLY
        };
        if self.structured {
            flags |= flag::SEND_DF;
        }
        flags
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

    fn transmission(&mut self) -> io::Result<End> {
        loop {
            let mut header = [0; Request::SIZE];
            match self.stream.read_exact(&mut header) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(End::Client),
                Err(e) => return Err(e),
            }
            let request = Request::decode(&header);
            if request.magic != wire::REQUEST_MAGIC {
                return Ok(End::Protocol("bad request magic"));
            }
            match request.kind {
                cmd::DISC => return Ok(End::Client),
                cmd::READ => self.read(&request)?,
                cmd::WRITE => {
                    if request.length > MAX_REQUEST {
                        return Ok(End::Protocol("write longer than the maximum"));
                    }
                    if !self.write(&request)? {
                        return Ok(End::Client);
                    }
                }
                cmd::WRITE_ZEROES => self.write_zeroes(&request)?,
                cmd::FLUSH => match self.export.flush() {
                    Ok(()) => self.done(&request)?,
                    Err(e) => self.error(&request, e, "flush failed")?,
                },
                cmd::TRIM => match self.range(&request) {
                    Err(e) => self.error(&request, e, "request past the end of the export")?,
                    Ok(()) => {
                        let trimmed = self.export.trim(request.offset, u64::from(request.length));
                        self.answer(
                            &request,
                            trimmed.and_then(|()| self.fua(&request)),
                            "trim failed",
                        )?;
                    }
                },
                cmd::BLOCK_STATUS => self.block_status(&request)?,
                _ => self.error(&request, errno::EINVAL, "unknown command")?,
            }
        }
    }

    /// Takes a write's data (`false`: the client went away before sending it all) and writes
    /// it, on a writable export; the data is always read, to stay in step.
    fn write(&mut self, request: &Request) -> io::Result<bool> {
        let len = request.length as usize;
        if self.buffer.len() < len {
            self.buffer.resize(len, 0);
        }
        match self.stream.read_exact(&mut self.buffer[..len]) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(e),
        }
        if !self.export.writable() {
            self.error(request, errno::EPERM, "the export is read-only")?;
            return Ok(true);
        }
        if self.range(request).is_err() {
            self.error(request, errno::EINVAL, "write past the end of the export")?;
            return Ok(true);
        }
        let written = self
            .export
            .write(request.offset, &self.buffer[..len])
            .and_then(|()| self.fua(request));
        self.answer(request, written, "write failed")?;
        Ok(true)
    }

    fn write_zeroes(&mut self, request: &Request) -> io::Result<()> {
        if !self.export.writable() {
            return self.error(request, errno::EPERM, "the export is read-only");
        }
        if self.range(request).is_err() {
            return self.error(request, errno::EINVAL, "request past the end of the export");
        }
        let unmap = request.flags & cmd_flag::NO_HOLE == 0;
        let zeroed = self
            .export
            .write_zeroes(request.offset, u64::from(request.length), unmap)
            .and_then(|()| self.fua(request));
        self.answer(request, zeroed, "write zeroes failed")
    }

    /// A write with `NBD_CMD_FLAG_FUA` is durable before its reply.
    fn fua(&self, request: &Request) -> Result<(), u32> {
        if request.flags & cmd_flag::FUA != 0 {
            self.export.flush()
        } else {
            Ok(())
        }
    }

    /// Replies to a request with no data: done, or its error.
    fn answer(
        &mut self,
        request: &Request,
        result: Result<(), u32>,
        failed: &str,
    ) -> io::Result<()> {
        match result {
            Ok(()) => self.done(request),
            Err(e) => self.error(request, e, failed),
        }
    }

    /// Checks a request's range: not empty, within the export.
    fn range(&self, request: &Request) -> Result<(), u32> {
        let end = request.offset.checked_add(u64::from(request.length));
        if request.length == 0 || end.is_none_or(|end| end > self.export.size()) {
            return Err(errno::EINVAL);
        }
        Ok(())
    }

    fn read(&mut self, request: &Request) -> io::Result<()> {
        if request.length > MAX_REQUEST {
            return self.error(request, errno::EINVAL, "read longer than the maximum");
        }
        if self.range(request).is_err() {
            return self.error(request, errno::EINVAL, "read past the end of the export");
        }
        let len = request.length as usize;
        if self.buffer.len() < len {
            self.buffer.resize(len, 0);
        }
        let data = &mut self.buffer[..len];
        if let Err(e) = self.export.read(request.offset, data) {
            let message = if e == errno::EPERM {
                "the client trimmed this range: it was released"
            } else {
                "read failed"
            };
            return self.error(request, e, message);
        }
        if self.structured {
            let header = wire::chunk_header(
                chunk::FLAG_DONE,
                chunk::OFFSET_DATA,
                request.cookie,
                request.length + 8,
            );
            let mut head = [0; 28];
            head[..20].copy_from_slice(&header);
            head[20..].copy_from_slice(&request.offset.to_be_bytes());
            self.stream.write_all(&head)?;
        } else {
            self.stream
                .write_all(&wire::simple_reply(0, request.cookie))?;
        }
        self.stream.write_all(&self.buffer[..len])
    }

    /// One `BLOCK_STATUS` chunk per selected context, the last one flagged done.
    fn block_status(&mut self, request: &Request) -> io::Result<()> {
        if !self.structured || self.contexts.is_empty() {
            return self.error(request, errno::EINVAL, "no metadata context was selected");
        }
        if self.range(request).is_err() {
            return self.error(request, errno::EINVAL, "request past the end of the export");
        }
        let max = if request.flags & cmd_flag::REQ_ONE != 0 {
            1
        } else {
            MAX_EXTENTS
        };
        let (offset, len) = (request.offset, u64::from(request.length));
        let mut chunks = Vec::with_capacity(self.contexts.len());
        for &context in &self.contexts {
            let extents = match context {
                Context::Allocation => match self.export.allocation(offset, len, max) {
                    Ok(extents) => extents
                        .into_iter()
                        .map(|(l, f)| (l, f & (allocation::HOLE | allocation::ZERO)))
                        .collect(),
                    Err(e) => return self.error(request, e, "block status failed"),
                },
                Context::Dirty(i) => match self.export.dirty_bitmaps().get(i) {
                    Some(bitmap) => bitmap.status(offset, len, max),
                    None => Vec::new(),
                },
            };
            if extents.is_empty() {
                return self.error(request, errno::EIO, "no extents");
            }
            chunks.push((context.id(), extents));
        }
        let mut out = Vec::new();
        let last = chunks.len() - 1;
        for (n, (id, extents)) in chunks.into_iter().enumerate() {
            let mut payload = Vec::with_capacity(4 + 8 * extents.len());
            payload.extend_from_slice(&id.to_be_bytes());
            for (length, flags) in extents {
                payload.extend_from_slice(&length.to_be_bytes());
                payload.extend_from_slice(&flags.to_be_bytes());
            }
            // At most MAX_EXTENTS extents: it fits a u32.
            let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
            let done = if n == last { chunk::FLAG_DONE } else { 0 };
            out.extend_from_slice(&wire::chunk_header(
                done,
                chunk::BLOCK_STATUS,
                request.cookie,
                length,
            ));
            out.extend_from_slice(&payload);
        }
        self.stream.write_all(&out)
    }

    /// A successful reply with no data.
    fn done(&mut self, request: &Request) -> io::Result<()> {
        if self.structured {
            self.stream.write_all(&wire::chunk_header(
                chunk::FLAG_DONE,
                chunk::NONE,
                request.cookie,
                0,
            ))
        } else {
            self.stream
                .write_all(&wire::simple_reply(0, request.cookie))
        }
    }

    fn error(&mut self, request: &Request, error: u32, message: &str) -> io::Result<()> {
        if !self.structured {
            return self
                .stream
                .write_all(&wire::simple_reply(error, request.cookie));
        }
        let message = message.as_bytes();
        // Short constant messages: they fit a u16 and a u32.
        let message_len = u16::try_from(message.len()).unwrap_or(0);
        let message = &message[..usize::from(message_len)];
        let mut out = wire::chunk_header(
            chunk::FLAG_DONE,
            chunk::ERROR,
            request.cookie,
            6 + u32::from(message_len),
        )
        .to_vec();
        out.extend_from_slice(&error.to_be_bytes());
        out.extend_from_slice(&message_len.to_be_bytes());
        out.extend_from_slice(message);
        self.stream.write_all(&out)
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
