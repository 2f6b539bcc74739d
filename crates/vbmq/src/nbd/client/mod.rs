//! An NBD client (fixed newstyle, `NBD_OPT_GO`, simple replies) for vbmq's own use: the base of
//! a `base=nbd` disk, a mirror's destination. Requests are pipelined: [`Client::submit`] sends
//! one ([`Client::submit_all`] several, in one system call) and returns, its [`Completion`]
//! runs when its reply comes, matched by cookie; the blocking verbs ([`Client::read`],
//! [`Client::write`], ...) are that and a wait.
//!
//! The server is untrusted: every length it sends is bounded before use, a reply the client did
//! not ask for ends the connection, nothing it sends can panic the client. A lost connection
//! fails the requests in flight with [`ClientError::Disconnected`]; [`Client::reconnect`] opens
//! a new one to the same export and refuses it if the export's size changed.

mod connection;
mod handshake;
mod tls;

use std::io;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub use connection::Completion;
use connection::Connection;
pub use handshake::{ExportInfo, MAX_REQUEST};
pub use tls::TlsDialer;

use super::wire::{self, Request, cmd, cmd_flag, flag};

/// Why a request or a connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection failed.
    #[error("NBD connection: {0}")]
    Io(#[from] io::Error),
    /// The server broke the protocol: the connection is ended.
    #[error("the NBD server broke the protocol: {0}")]
    Protocol(&'static str),
    /// The server refused the export (`NBD_REP_ERR_*`).
    #[error("the NBD server refused the export (reply {kind:#x}): {message}")]
    Refused {
        /// The reply type.
        kind: u32,
        /// The server's message.
        message: String,
    },
    /// The server failed the request with this `NBD_E*` value.
    #[error("the NBD server failed the request: error {0}")]
    Server(u32),
    /// The connection is lost: [`Client::reconnect`].
    #[error("the NBD connection is lost")]
    Disconnected,
    /// The request cannot be sent to this export.
    #[error("invalid NBD request: {0}")]
    Invalid(&'static str),
}

/// Opens a new stream to the server, for the first connection and each reconnection.
pub type Connector = Box<dyn Fn() -> io::Result<UnixStream> + Send + Sync>;

/// A command to send.
#[derive(Clone, Copy, Debug)]
pub enum Command<'a> {
    /// Read `len` bytes at `offset`: the completion gets them.
    Read {
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
    },
    /// Write `data` at `offset`; `fua`: durable once acknowledged.
    Write {
        /// Where.
        offset: u64,
        /// What.
        data: &'a [u8],
        /// Force unit access.
        fua: bool,
    },
    /// Make every acknowledged write durable.
    Flush,
    /// The range's data is not needed any more.
    Trim {
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
    },
    /// Write zeroes; `may_trim`: the server may punch a hole instead.
    WriteZeroes {
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
        /// The server may deallocate.
        may_trim: bool,
    },
}

/// How a connection is opened.
enum Dialer {
    /// A stream in the clear (a Unix socket).
    Clear(Connector),
    /// TCP, then TLS.
    Tls(TlsDialer),
}

/// A client of one export.
pub struct Client {
    connector: Dialer,
    name: String,
    info: ExportInfo,
    handshake_timeout: Duration,
    current: Mutex<Arc<Connection>>,
    cookies: AtomicU64,
}

/// The first and the longest pause between two reconnection attempts.
const RETRY_MIN: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_millis(500);

/// How long a server may take over its handshake before the connection is given up.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

impl Client {
    /// Connects to export `name` of the server listening on the Unix socket `path`.
    pub fn connect_unix(path: PathBuf, name: &str) -> Result<Self, ClientError> {
        Self::connect(Box::new(move || UnixStream::connect(&path)), name)
    }

    /// Connects to the export `uri` names.
    pub fn connect_uri(uri: &super::uri::NbdUri) -> Result<Self, ClientError> {
        Self::connect_unix(uri.socket.clone(), &uri.export)
    }

    /// Connects to export `name` over the streams `connector` opens.
    pub fn connect(connector: Connector, name: &str) -> Result<Self, ClientError> {
        Self::dial(Dialer::Clear(connector), name)
    }

    /// Connects to export `name` of a server that requires TLS.
    pub fn connect_tls(dialer: TlsDialer, name: &str) -> Result<Self, ClientError> {
        Self::dial(Dialer::Tls(dialer), name)
    }

    fn dial(connector: Dialer, name: &str) -> Result<Self, ClientError> {
        let (conn, info) = open(&connector, name, HANDSHAKE_TIMEOUT)?;
        Ok(Client {
            connector,
            name: name.to_owned(),
            info,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            current: Mutex::new(conn),
            cookies: AtomicU64::new(1),
        })
    }

    /// What the server said of the export at the first connection.
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// The current connection takes requests.
    pub fn is_connected(&self) -> bool {
        self.connection().is_open()
    }

    /// Opens a new connection if the current one is lost; the export must still have the size
    /// it had. Requests in flight on the old connection have failed already.
    pub fn reconnect(&self) -> Result<(), ClientError> {
        if self.is_connected() {
            return Ok(());
        }
        let (conn, info) = open(&self.connector, &self.name, self.handshake_timeout)?;
        if info.size != self.info.size || info.read_only() != self.info.read_only() {
            conn.shut_down();
            conn.join();
            return Err(ClientError::Protocol(
                "the export changed size or mode across a reconnection",
            ));
        }
        let old = std::mem::replace(&mut *lock(&self.current), conn);
        old.join();
        Ok(())
    }

    /// Runs `op` until it succeeds or fails for a reason other than a lost connection,
    /// reconnecting between tries, until `deadline`: then the last error. For a caller that
    /// must wait out a server's restart (a fetch of a block no one else holds) but not
    /// forever. A request `op` repeats must be one that may run twice (a read, a write of the
    /// same data).
    pub fn with_reconnect<T>(
        &self,
        deadline: Instant,
        mut op: impl FnMut(&Client) -> Result<T, ClientError>,
    ) -> Result<T, ClientError> {
        let mut pause = RETRY_MIN;
        loop {
            let error = match op(self) {
                Err(ClientError::Disconnected) => ClientError::Disconnected,
                other => return other,
            };
            // Reconnects until the deadline; a server that answers but refuses ends it.
            loop {
                let now = Instant::now();
                if now >= deadline {
                    return Err(error);
                }
                match self.reconnect() {
                    Ok(()) => break,
                    Err(ClientError::Io(_) | ClientError::Disconnected) => {
                        std::thread::sleep(pause.min(deadline - now));
                        pause = (pause * 2).min(RETRY_MAX);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Ends the current connection at once (a server that stopped answering): requests in
    /// flight fail with [`ClientError::Disconnected`].
    pub fn abort(&self) {
        let conn = self.connection();
        conn.shut_down();
        conn.join();
    }

    /// Sends `command`; `done` runs once with its outcome (at once if it cannot be sent).
    pub fn submit(&self, command: Command<'_>, done: Completion) {
        self.submit_all([(command, done)]);
    }

    /// Sends `commands` together, in one system call where the socket takes them all (a
    /// mirror's guest writes of one pass): each completion runs once with its command's
    /// outcome (at once if it cannot be sent). The server may run them in any order.
    pub fn submit_all<'a>(&self, commands: impl IntoIterator<Item = (Command<'a>, Completion)>) {
        let mut batch = Vec::new();
        for (command, done) in commands {
            match self.request(command) {
                Ok(Some((request, data))) => batch.push((request, data, done)),
                // A flush on a server that has none: nothing is cached there.
                Ok(None) => done(Ok(Vec::new())),
                Err(e) => done(Err(e)),
            }
        }
        self.connection().send_all(batch);
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ClientError> {
        let len = u32::try_from(buf.len()).map_err(|_| ClientError::Invalid("read too long"))?;
        let data = self.wait(Command::Read { offset, len })?;
        if data.len() != buf.len() {
            return Err(ClientError::Protocol("a read of the wrong length"));
        }
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        self.wait(Command::Write { offset, data, fua }).map(drop)
    }

    /// Makes every acknowledged write durable.
    pub fn flush(&self) -> Result<(), ClientError> {
        self.wait(Command::Flush).map(drop)
    }

    /// Trims `len` bytes at `offset`.
    pub fn trim(&self, offset: u64, len: u32) -> Result<(), ClientError> {
        self.wait(Command::Trim { offset, len }).map(drop)
    }

    /// Writes `len` zeroes at `offset`.
    pub fn write_zeroes(&self, offset: u64, len: u32, may_trim: bool) -> Result<(), ClientError> {
        self.wait(Command::WriteZeroes {
            offset,
            len,
            may_trim,
        })
        .map(drop)
    }

    fn wait(&self, command: Command<'_>) -> Result<Vec<u8>, ClientError> {
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(
            command,
            Box::new(move |result| {
                let _ = tx.send(result);
            }),
        );
        rx.recv().unwrap_or(Err(ClientError::Disconnected))
    }

    fn connection(&self) -> Arc<Connection> {
        lock(&self.current).clone()
    }

    fn cookie(&self) -> u64 {
        self.cookies.fetch_add(1, Ordering::Relaxed)
    }

    /// The request for `command`, checked against the export; a write's data beside it.
    /// `None`: nothing to send.
    fn request<'a>(
        &self,
        command: Command<'a>,
    ) -> Result<Option<(Request, &'a [u8])>, ClientError> {
        let info = &self.info;
        let (kind, flags, offset, length, data) = match command {
            Command::Read { offset, len } => (cmd::READ, 0, offset, len, &[][..]),
            Command::Write { offset, data, fua } => {
                let len = u32::try_from(data.len())
                    .map_err(|_| ClientError::Invalid("write too long"))?;
                let flags = if fua && info.has(flag::SEND_FUA) {
                    cmd_flag::FUA
                } else {
                    0
                };
                (cmd::WRITE, flags, offset, len, data)
            }
            Command::Flush => {
                if !info.has(flag::SEND_FLUSH) {
                    return Ok(None);
                }
                (cmd::FLUSH, 0, 0, 0, &[][..])
            }
            Command::Trim { offset, len } => {
                if !info.has(flag::SEND_TRIM) {
                    return Err(ClientError::Invalid("the export has no trim"));
                }
                (cmd::TRIM, 0, offset, len, &[][..])
            }
            Command::WriteZeroes {
                offset,
                len,
                may_trim,
            } => {
                if !info.has(flag::SEND_WRITE_ZEROES) {
                    return Err(ClientError::Invalid("the export has no write zeroes"));
                }
                let flags = if may_trim { 0 } else { cmd_flag::NO_HOLE };
                (cmd::WRITE_ZEROES, flags, offset, len, &[][..])
            }
        };
        if kind != cmd::READ && kind != cmd::FLUSH && info.read_only() {
            return Err(ClientError::Invalid("the export is read-only"));
        }
        if kind != cmd::FLUSH {
            check_range(info, kind, offset, length)?;
        }
        Ok(Some((
            Request {
                magic: wire::REQUEST_MAGIC,
                flags,
                kind,
                cookie: self.cookie(),
                offset,
                length,
            },
            data,
        )))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let conn = self.connection();
        if conn.is_open() {
            conn.disconnect(self.cookie());
        }
        conn.shut_down();
        conn.join();
    }
}

/// A request's range: inside the export, not empty, aligned to its minimum block, not longer
/// than its longest request (trims and write zeroes carry no data: any length that fits).
fn check_range(info: &ExportInfo, kind: u16, offset: u64, len: u32) -> Result<(), ClientError> {
    if len == 0 {
        return Err(ClientError::Invalid("an empty request"));
    }
    let end = offset
        .checked_add(u64::from(len))
        .filter(|&end| end <= info.size)
        .ok_or(ClientError::Invalid("a request past the end of the export"))?;
    let min = u64::from(info.min_block);
    if !offset.is_multiple_of(min) || (!end.is_multiple_of(min) && end != info.size) {
        return Err(ClientError::Invalid(
            "a request not aligned to the minimum block",
        ));
    }
    if (kind == cmd::READ || kind == cmd::WRITE) && len > info.max_request {
        return Err(ClientError::Invalid(
            "a request longer than the export's maximum",
        ));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Connects and negotiates, the handshake bounded by `timeout`; the connection's reply thread
/// runs on return.
fn open(
    connector: &Dialer,
    name: &str,
    timeout: Duration,
) -> Result<(Arc<Connection>, ExportInfo), ClientError> {
    let mut stream = match connector {
        Dialer::Clear(connector) => {
            let mut stream = connector()?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            handshake::hello(&mut stream)?;
            stream
        }
        Dialer::Tls(dialer) => dialer.dial(timeout)?,
    };
    let info = handshake::go(&mut stream, name)?;
    stream.set_read_timeout(None)?;
    stream.set_write_timeout(None)?;
    Ok((Connection::start(stream)?, info))
}

#[cfg(test)]
mod tests;
