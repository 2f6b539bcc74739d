//! An export's listening socket: each client on a thread of its own (never a guest's queue
//! thread), [`MAX_CONNECTIONS`] at most, every one closed when the export ends. A Unix socket
//! serves NBD in the clear; a TCP socket only with TLS ([`super::tls`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::server::{self, End, Export};
use super::tls::accept::Accepted;

/// Where an export listens.
pub enum NbdListener {
    /// A Unix socket: NBD in the clear (the socket file is 0600).
    Unix(UnixListener),
    /// A TCP socket: every client must start TLS with these credentials.
    Tls(TcpListener, Arc<rustls::ServerConfig>),
}

impl From<UnixListener> for NbdListener {
    fn from(listener: UnixListener) -> Self {
        NbdListener::Unix(listener)
    }
}

impl NbdListener {
    fn fd(&self) -> RawFd {
        match self {
            NbdListener::Unix(l) => l.as_raw_fd(),
            NbdListener::Tls(l, _) => l.as_raw_fd(),
        }
    }

    fn accept(&self) -> io::Result<Peer> {
        match self {
            NbdListener::Unix(l) => l.accept().map(|(s, _)| Peer::Unix(s)),
            NbdListener::Tls(l, _) => l.accept().map(|(s, _)| Peer::Tcp(s)),
        }
    }
}

/// A client's connection as accepted.
enum Peer {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Peer {
    fn try_clone(&self) -> io::Result<Peer> {
        match self {
            Peer::Unix(s) => s.try_clone().map(Peer::Unix),
            Peer::Tcp(s) => s.try_clone().map(Peer::Tcp),
        }
    }

    fn shutdown(&self) {
        let _ = match self {
            Peer::Unix(s) => s.shutdown(Shutdown::Both),
            Peer::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

/// Clients served at once; one more is closed at once (each holds up to 32 MiB).
pub const MAX_CONNECTIONS: usize = 16;

/// A running NBD server for one export.
pub struct NbdServer {
    /// An eventfd, written to stop the accepting thread.
    stop: Arc<File>,
    thread: Option<JoinHandle<()>>,
}

/// A client's whole handshake must end within this, so that silent clients cannot hold every
/// place for long; in transmission a client may stay idle as long as it likes.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The clients being served, by number: a clone of each stream, to shut it down.
type Clients = Arc<Mutex<HashMap<u64, Peer>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NbdServer {
    /// Serves `export` on `listener` until [`NbdServer::stop`]; `name` prefixes log lines.
    pub fn start(
        listener: impl Into<NbdListener>,
        export: Arc<dyn Export>,
        name: String,
    ) -> io::Result<Self> {
        let listener = listener.into();
        // SAFETY: eventfd(2) with constant arguments; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        let stop = Arc::new(File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vbmq-nbd".into())
            .spawn(move || accept_loop(&listener, &stopped, &export, &name))?;
        Ok(NbdServer {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops accepting, disconnects every client and returns once no thread reads the export.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let _ = (&*self.stop).write_all(&1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Waits for a client or the stop byte; `true`: a client is waiting.
fn wait(listener: &NbdListener, stopped: &File) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: listener.fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stopped.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is an array of two initialised pollfds that outlives the call.
        let ret = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if ret < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return ret > 0 && fds[1].revents == 0 && fds[0].revents & libc::POLLIN != 0;
    }
}

fn accept_loop(listener: &NbdListener, stopped: &File, export: &Arc<dyn Export>, name: &str) {
    let clients: Clients = Arc::default();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut next = 0u64;
    while wait(listener, stopped) {
        let stream = match listener.accept() {
            Ok(stream) => stream,
            Err(e) => {
                crate::limited!(warn, "{name}: accept: {e}");
                continue;
            }
        };
        threads.retain(|t| !t.is_finished());
        if lock(&clients).len() >= MAX_CONNECTIONS {
            crate::limited!(
                warn,
                "{name}: {MAX_CONNECTIONS} NBD clients already: one more refused"
            );
            continue;
        }
        let Ok(clone) = stream.try_clone() else {
            continue;
        };
        next += 1;
        let id = next;
        lock(&clients).insert(id, clone);
        let (export, clients_of_thread, owned) = (export.clone(), clients.clone(), name.to_owned());
        let tls = match listener {
            NbdListener::Tls(_, config) => Some(config.clone()),
            NbdListener::Unix(_) => None,
        };
        let spawned = std::thread::Builder::new()
            .name("vbmq-nbd-client".into())
            .spawn(move || {
                client(stream, tls.as_ref(), export.as_ref(), &owned);
                lock(&clients_of_thread).remove(&id);
            });
        match spawned {
            Ok(thread) => threads.push(thread),
            Err(e) => {
                lock(&clients).remove(&id);
                crate::limited!(warn, "{name}: no thread for an NBD client: {e}");
            }
        }
    }
    for stream in lock(&clients).values() {
        stream.shutdown();
    }
    for thread in threads {
        let _ = thread.join();
    }
}

/// Serves one client to its end: over TCP, TLS first (the whole handshake, TLS's and NBD's,
/// within [`HANDSHAKE_TIMEOUT`]).
fn client(peer: Peer, tls: Option<&Arc<rustls::ServerConfig>>, export: &dyn Export, name: &str) {
    let until = Instant::now() + HANDSHAKE_TIMEOUT;
    let (stream, tls_flags) = match (peer, tls) {
        (Peer::Unix(stream), _) => (stream, None),
        (Peer::Tcp(tcp), Some(config)) => match super::tls::accept(tcp, config, until) {
            Ok(Accepted::Tls(stream, flags)) => (stream, Some(flags)),
            Ok(Accepted::Ended(why)) => {
                crate::limited!(info, "{name}: NBD client disconnected: {why}");
                return;
            }
            Err(e) => {
                crate::limited!(info, "{name}: NBD client's TLS failed: {e}");
                return;
            }
        },
        (Peer::Tcp(_), None) => return,
    };
    let mut stream = Deadline {
        stream,
        until: Some(until),
    };
    let transmission = |s: &mut Deadline| {
        s.until = None;
        s.stream.try_clone()
    };
    match server::serve_greeted(&mut stream, export, tls_flags, transmission) {
        Ok(End::Client) => {}
        Ok(End::Protocol(why)) => crate::limited!(info, "{name}: NBD client disconnected: {why}"),
        Err(e) => crate::limited!(info, "{name}: NBD client gone: {e}"),
    }
}

/// A client's stream whose reads fail once `until` has passed (while it is set).
struct Deadline {
    stream: UnixStream,
    until: Option<Instant>,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(until) = self.until {
            wait_readable(&self.stream, until)?;
        }
        self.stream.read(buf)
    }
}

impl Write for Deadline {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Waits until `stream` has something to read (or is closed), or fails once `until` passes.
fn wait_readable(stream: &UnixStream, until: Instant) -> io::Result<()> {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX).max(1);
        let mut fd = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one initialised pollfd that outlives the call.
        let ret = unsafe { libc::poll(&mut fd, 1, ms) };
        if ret > 0 {
            return Ok(());
        }
        if ret < 0 {
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_client_times_out_in_its_handshake_only() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut stream = Deadline {
            stream: ours,
            until: Some(Instant::now() + Duration::from_millis(20)),
        };
        let mut byte = [0; 1];
        let e = stream.read(&mut byte).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        // In transmission, a read waits for the client however long it takes.
        stream.until = None;
        theirs.write_all(&[7]).unwrap();
        assert_eq!(stream.read(&mut byte).unwrap(), 1);
        assert_eq!(byte, [7]);
    }
}
