//! Transmission, pipelined: the connection's thread reads requests while earlier ones run on
//! the export's workers (threads of this connection, never a guest queue's), and each reply is
//! written whole as soon as its request is done, in any order (the client matches cookies).
//! [`InFlight`] bounds what a client has in flight; a client that does not read its replies
//! stalls its own connection and nothing else.
//!
//! `NBD_CMD_FLUSH` makes durable every write answered before it, as the protocol asks: a
//! write is answered only once the export has done it.

use std::collections::VecDeque;
use std::io::{self, BufReader, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::Scope;

use super::export::{End, Export, MAX_REQUEST};
use super::in_flight::{InFlight, Place};
use super::meta_context::Context;
use super::wire::{self, Request, allocation, chunk, cmd, cmd_flag, errno};

/// Workers of one connection at most: requests run this many at a time.
pub const MAX_WORKERS: usize = 8;
/// Extents in one block status reply, per context.
const MAX_EXTENTS: usize = 4096;

/// What negotiation settled for transmission.
pub(super) struct Settled {
    pub structured: bool,
    /// The metadata contexts selected (`SET_META_CONTEXT`), each once.
    pub contexts: Vec<Context>,
}

/// One request read, waiting for a worker.
struct Job<'a> {
    request: Request,
    /// A write's data.
    payload: Vec<u8>,
    _place: Place<'a>,
}

#[derive(Default)]
struct Queue<'a> {
    jobs: VecDeque<Job<'a>>,
    workers: usize,
    idle: usize,
    /// The reader is done: workers leave once the queue is empty.
    closed: bool,
}

/// What the reader and the workers of one connection share.
struct Connection<'a, W> {
    export: &'a dyn Export,
    settled: Settled,
    writer: Mutex<W>,
    queue: Mutex<Queue<'a>>,
    queued: Condvar,
    /// A reply could not be written: the client is gone, what is queued is dropped.
    broken: AtomicBool,
    failure: Mutex<Option<io::Error>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serves requests read from `reader`, replies written to `writer` (the same connection),
/// until the client disconnects; returns once every request read has been answered.
pub(super) fn serve<R: Read, W: Write + Send>(
    reader: &mut R,
    writer: W,
    export: &dyn Export,
    settled: Settled,
) -> io::Result<End> {
    // Requests of a client arrive together: read them in few system calls.
    let mut reader = BufReader::with_capacity(64 << 10, reader);
    let in_flight = InFlight::new(MAX_REQUEST as usize);
    let conn = Connection {
        export,
        settled,
        writer: Mutex::new(writer),
        queue: Mutex::default(),
        queued: Condvar::new(),
        broken: AtomicBool::new(false),
        failure: Mutex::new(None),
    };
    let end = std::thread::scope(|scope| {
        let end = read_requests(&mut reader, &conn, &in_flight, scope);
        if !matches!(end, Ok(End::Client)) {
            // A broken framing or a failed connection: what is queued will not be answered.
            conn.broken.store(true, Ordering::Release);
        }
        lock(&conn.queue).closed = true;
        conn.queued.notify_all();
        end
    });
    match lock(&conn.failure).take() {
        Some(e) => Err(e),
        None => end,
    }
}

/// The reader: each request takes a place in flight, then goes to a worker.
fn read_requests<'a, 's, R: Read, W: Write + Send>(
    reader: &mut R,
    conn: &'s Connection<'a, W>,
    in_flight: &'a InFlight,
    scope: &'s Scope<'s, '_>,
) -> io::Result<End> {
    loop {
        let mut header = [0; Request::SIZE];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(End::Client),
            // A reply failed first: the client is gone.
            Err(_) if conn.broken.load(Ordering::Acquire) => return Ok(End::Client),
            Err(e) => return Err(e),
        }
        let request = Request::decode(&header);
        if request.magic != wire::REQUEST_MAGIC {
            return Ok(End::Protocol("bad request magic"));
        }
        let job = match request.kind {
            // Disconnect: what is in flight is still answered.
            cmd::DISC => return Ok(End::Client),
            cmd::WRITE => {
                if request.length > MAX_REQUEST {
                    return Ok(End::Protocol("write longer than the maximum"));
                }
                let len = request.length as usize;
                let place = in_flight.take(len);
                // The data is always read, to stay in step, whatever the reply.
                let mut payload = vec![0; len];
                match reader.read_exact(&mut payload) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(End::Client),
                    Err(e) => return Err(e),
                }
                Job {
                    request,
                    payload,
                    _place: place,
                }
            }
            cmd::READ => {
                // A read longer than the maximum only gets an error: it holds no data.
                let len = match request.length {
                    len if len <= MAX_REQUEST => len as usize,
                    _ => 0,
                };
                Job {
                    request,
                    payload: Vec::new(),
                    _place: in_flight.take(len),
                }
            }
            _ => Job {
                request,
                payload: Vec::new(),
                _place: in_flight.take(0),
            },
        };
        dispatch(conn, job, scope);
    }
}

/// Queues `job` for an idle worker, starting one if none is idle and there are fewer than
/// [`MAX_WORKERS`]; with no worker at all (none could start), runs it here.
fn dispatch<'a, 's, W: Write + Send>(
    conn: &'s Connection<'a, W>,
    job: Job<'a>,
    scope: &'s Scope<'s, '_>,
) {
    let mut queue = lock(&conn.queue);
    queue.jobs.push_back(job);
    if queue.idle > 0 || queue.workers >= MAX_WORKERS {
        drop(queue);
        conn.queued.notify_one();
        return;
    }
    queue.workers += 1;
    drop(queue);
    let started = std::thread::Builder::new()
        .name("vbmq-nbd-io".into())
        .spawn_scoped(scope, || conn.work());
    if let Err(e) = started {
        crate::limited!(warn, "NBD: no thread for a worker: {e}");
        let mut queue = lock(&conn.queue);
        queue.workers -= 1;
        if queue.workers == 0 {
            let job = queue.jobs.pop_front();
            drop(queue);
            if let Some(job) = job {
                conn.run(job);
            }
        }
    }
}

impl<'a, W: Write + Send> Connection<'a, W> {
    /// A worker: runs queued requests until the reader is done and the queue empty.
    fn work(&self) {
        loop {
            let job = {
                let mut queue = lock(&self.queue);
                loop {
                    if let Some(job) = queue.jobs.pop_front() {
                        break job;
                    }
                    if queue.closed {
                        queue.workers -= 1;
                        return;
                    }
                    queue.idle += 1;
                    queue = self.queued.wait(queue).unwrap_or_else(|p| p.into_inner());
                    queue.idle -= 1;
                }
            };
            self.run(job);
        }
    }

    /// Runs one request and writes its reply whole; its place in flight is freed after.
    fn run(&self, job: Job<'a>) {
        if self.broken.load(Ordering::Acquire) {
            return;
        }
        let reply = self.reply(&job.request, &job.payload);
        drop(job.payload);
        let written = lock(&self.writer).write_all(&reply);
        if let Err(e) = written {
            self.broken.store(true, Ordering::Release);
            lock(&self.failure).get_or_insert(e);
        }
    }

    /// The whole reply to `request`.
    fn reply(&self, request: &Request, payload: &[u8]) -> Vec<u8> {
        match request.kind {
            cmd::READ => self.read(request),
            cmd::WRITE => self.write(request, payload),
            cmd::WRITE_ZEROES => self.write_zeroes(request),
            cmd::FLUSH => self.answer(request, self.export.flush(), "flush failed"),
            cmd::TRIM => match self.range(request) {
                Err(e) => self.error(request, e, "request past the end of the export"),
                Ok(()) => {
                    let trimmed = self.export.trim(request.offset, u64::from(request.length));
                    self.answer(
                        request,
                        trimmed.and_then(|()| self.fua(request)),
                        "trim failed",
                    )
                }
            },
            cmd::BLOCK_STATUS => self.block_status(request),
            _ => self.error(request, errno::EINVAL, "unknown command"),
        }
    }

    fn write(&self, request: &Request, data: &[u8]) -> Vec<u8> {
        if !self.export.writable() {
            return self.error(request, errno::EPERM, "the export is read-only");
        }
        if self.range(request).is_err() {
            return self.error(request, errno::EINVAL, "write past the end of the export");
        }
        let written = self
            .export
            .write(request.offset, data)
            .and_then(|()| self.fua(request));
        self.answer(request, written, "write failed")
    }

    fn write_zeroes(&self, request: &Request) -> Vec<u8> {
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

    /// The reply to a request with no data: done, or its error.
    fn answer(&self, request: &Request, result: Result<(), u32>, failed: &str) -> Vec<u8> {
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

    /// The reply's header and the data read into the same buffer, written at once.
    fn read(&self, request: &Request) -> Vec<u8> {
        if request.length > MAX_REQUEST {
            return self.error(request, errno::EINVAL, "read longer than the maximum");
        }
        if self.range(request).is_err() {
            return self.error(request, errno::EINVAL, "read past the end of the export");
        }
        let head = if self.settled.structured { 28 } else { 16 };
        let mut reply = vec![0; head + request.length as usize];
        if let Err(e) = self.export.read(request.offset, &mut reply[head..]) {
            let message = if e == errno::EPERM {
                "the client trimmed this range: it was released"
            } else {
                "read failed"
            };
            return self.error(request, e, message);
        }
        if self.settled.structured {
            let header = wire::chunk_header(
                chunk::FLAG_DONE,
                chunk::OFFSET_DATA,
                request.cookie,
                request.length + 8,
            );
            reply[..20].copy_from_slice(&header);
            reply[20..28].copy_from_slice(&request.offset.to_be_bytes());
        } else {
            reply[..16].copy_from_slice(&wire::simple_reply(0, request.cookie));
        }
        reply
    }

    /// One `BLOCK_STATUS` chunk per selected context, the last one flagged done.
    fn block_status(&self, request: &Request) -> Vec<u8> {
        if !self.settled.structured || self.settled.contexts.is_empty() {
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
        let mut chunks = Vec::with_capacity(self.settled.contexts.len());
        for &context in &self.settled.contexts {
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
        out
    }

    /// A successful reply with no data.
    fn done(&self, request: &Request) -> Vec<u8> {
        if self.settled.structured {
            wire::chunk_header(chunk::FLAG_DONE, chunk::NONE, request.cookie, 0).to_vec()
        } else {
            wire::simple_reply(0, request.cookie).to_vec()
        }
    }

    fn error(&self, request: &Request, error: u32, message: &str) -> Vec<u8> {
        if !self.settled.structured {
            return wire::simple_reply(error, request.cookie).to_vec();
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
        out
    }
}
