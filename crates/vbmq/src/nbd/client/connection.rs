//! One connection in transmission: requests written under a lock (a batch of headers and
//! writes' data in one vectored write), replies read by a thread of their own through a buffer
//! (many replies in one read) and matched to their requests by cookie, so that any number of
//! requests are in flight at once. A reply the client did not ask for,
//! or a broken one, ends the connection: every request still in flight then completes with
//! [`ClientError::Disconnected`], and the connection takes no more.

use std::collections::HashMap;
use std::io::{self, BufReader, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::ClientError;
use crate::nbd::wire::{self, Request, cmd};

/// Called once with a request's outcome: a read's data, or nothing for the other commands.
/// It runs on the connection's reply thread, or on the submitter's when the request never
/// left.
pub type Completion = Box<dyn FnOnce(Result<Vec<u8>, ClientError>) + Send>;

struct Pending {
    /// A read's length: that many bytes follow its reply.
    read_len: Option<u32>,
    done: Completion,
}

#[derive(Default)]
struct Inflight {
    /// Set once the connection is over: no request enters after.
    ended: bool,
    by_cookie: HashMap<u64, Pending>,
}

pub(super) struct Connection {
    writer: Mutex<UnixStream>,
    inflight: Mutex<Inflight>,
    /// A clone of the stream, to shut it down from any thread.
    control: UnixStream,
    replies: Mutex<Option<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connection {
    /// Starts the reply thread on a stream in transmission.
    pub(super) fn start(stream: UnixStream) -> io::Result<Arc<Self>> {
        let reader = stream.try_clone()?;
        let control = stream.try_clone()?;
        let conn = Arc::new(Connection {
            writer: Mutex::new(stream),
            inflight: Mutex::default(),
            control,
            replies: Mutex::new(None),
        });
        let replies = conn.clone();
        let thread = std::thread::Builder::new()
            .name("vbmq-nbd-client".into())
            .spawn(move || replies.read_replies(reader))?;
        *lock(&conn.replies) = Some(thread);
        Ok(conn)
    }

    /// The connection still takes requests.
    pub(super) fn is_open(&self) -> bool {
        !lock(&self.inflight).ended
    }

    /// Sends `batch`, each request with a write's data, together: one vectored write where
    /// the socket takes it all. Each completion is called with its request's reply.
    pub(super) fn send_all(&self, batch: Vec<(Request, &[u8], Completion)>) {
        if batch.is_empty() {
            return;
        }
        let mut headers = Vec::with_capacity(batch.len());
        let mut data = Vec::with_capacity(batch.len());
        {
            let mut inflight = lock(&self.inflight);
            if inflight.ended {
                drop(inflight);
                for (_, _, done) in batch {
                    done(Err(ClientError::Disconnected));
                }
                return;
            }
            for (request, bytes, done) in batch {
                let read_len = (request.kind == cmd::READ).then_some(request.length);
                inflight
                    .by_cookie
                    .insert(request.cookie, Pending { read_len, done });
                headers.push(request.encode());
                data.push(bytes);
            }
        }
        let mut slices = Vec::with_capacity(2 * headers.len());
        for (header, bytes) in headers.iter().zip(&data) {
            slices.push(IoSlice::new(header));
            if !bytes.is_empty() {
                slices.push(IoSlice::new(bytes));
            }
        }
        if write_all_vectored(&mut *lock(&self.writer), &mut slices).is_err() {
            // The reply thread sees the end too and fails these requests with the rest.
            self.shut_down();
        }
    }

    /// Sends `NBD_CMD_DISC`: the server closes once it has answered what came before.
    pub(super) fn disconnect(&self, cookie: u64) {
        let request = Request {
            magic: wire::REQUEST_MAGIC,
            flags: 0,
            kind: cmd::DISC,
            cookie,
            offset: 0,
            length: 0,
        };
        let mut writer = lock(&self.writer);
        if writer.write_all(&request.encode()).is_err() {
            drop(writer);
            self.shut_down();
        }
    }

    /// Ends the connection at once: requests in flight fail.
    pub(super) fn shut_down(&self) {
        let _ = self.control.shutdown(Shutdown::Both);
    }

    /// Waits for the reply thread (after [`Connection::shut_down`] or a `DISC`).
    pub(super) fn join(&self) {
        let mut replies = lock(&self.replies);
        // A completion (run on the reply thread) that reconnects or drops the client must not
        // wait for its own thread.
        if replies
            .as_ref()
            .is_some_and(|t| t.thread().id() == std::thread::current().id())
        {
            return;
        }
        let thread = replies.take();
        drop(replies);
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    fn read_replies(&self, reader: UnixStream) {
        // Replies to a batch arrive together: read them in few system calls.
        let mut reader = BufReader::with_capacity(64 << 10, reader);
        let why = loop {
            if let Err(e) = self.read_reply(&mut reader) {
                break e;
            }
        };
        if !matches!(why, ClientError::Disconnected) {
            crate::limited!(warn, "NBD connection ended: {why}");
        }
        self.shut_down();
        let orphans = {
            let mut inflight = lock(&self.inflight);
            inflight.ended = true;
            std::mem::take(&mut inflight.by_cookie)
        };
        for (_, pending) in orphans {
            (pending.done)(Err(ClientError::Disconnected));
        }
    }

    /// Reads one reply and completes its request; an error ends the connection.
    fn read_reply(&self, reader: &mut impl Read) -> Result<(), ClientError> {
        let mut header = [0; 16];
        match reader.read_exact(&mut header) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Disconnected);
            }
            Err(e) => return Err(e.into()),
        }
        let magic = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        if magic == wire::STRUCTURED_REPLY_MAGIC {
            return Err(ClientError::Protocol("structured reply, not negotiated"));
        }
        if magic != wire::SIMPLE_REPLY_MAGIC {
            return Err(ClientError::Protocol("bad reply magic"));
        }
        let error = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
        let mut cookie = [0; 8];
        cookie.copy_from_slice(&header[8..16]);
        let cookie = u64::from_be_bytes(cookie);
        let pending = lock(&self.inflight)
            .by_cookie
            .remove(&cookie)
            .ok_or(ClientError::Protocol("a reply to no request in flight"))?;
        if error != 0 {
            (pending.done)(Err(ClientError::Server(error)));
            return Ok(());
        }
        let mut data = Vec::new();
        if let Some(len) = pending.read_len {
            // Our own request's length, bounded when it was sent: not the server's word.
            data.resize(len as usize, 0);
            if let Err(e) = reader.read_exact(&mut data) {
                // Failed with the others once the connection is marked ended, so that its
                // caller, told `Disconnected`, finds the connection lost and reconnects.
                lock(&self.inflight).by_cookie.insert(cookie, pending);
                return Err(e.into());
            }
        }
        (pending.done)(Ok(data));
        Ok(())
    }
}

/// Writes every byte of `slices` (the standard library's own is unstable).
fn write_all_vectored(writer: &mut impl Write, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !slices.is_empty() {
        match writer.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
