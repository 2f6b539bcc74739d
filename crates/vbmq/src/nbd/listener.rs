//! An export's listening socket: each client on a thread of its own (never a guest's queue
//! thread), [`MAX_CONNECTIONS`] at most, every one closed when the export ends.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::server::{self, End, Export};

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
type Clients = Arc<Mutex<HashMap<u64, UnixStream>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl NbdServer {
    /// Serves `export` on `listener` until [`NbdServer::stop`]; `name` prefixes log lines.
    pub fn start(
        listener: UnixListener,
        export: Arc<dyn Export>,
        name: String,
    ) -> io::Result<Self> {
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
fn wait(listener: &UnixListener, stopped: &File) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
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

fn accept_loop(listener: &UnixListener, stopped: &File, export: &Arc<dyn Export>, name: &str) {
    let clients: Clients = Arc::default();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut next = 0u64;
    while wait(listener, stopped) {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
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
        let spawned = std::thread::Builder::new()
            .name("vbmq-nbd-client".into())
            .spawn(move || {
                client(stream, export.as_ref(), &owned);
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
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    for thread in threads {
        let _ = thread.join();
    }
}

/// Serves one client to its end.
fn client(stream: UnixStream, export: &dyn Export, name: &str) {
    let mut stream = Deadline {
        stream,
        until: Some(Instant::now() + HANDSHAKE_TIMEOUT),
    };
    let transmission = |s: &mut Deadline| {
        s.until = None;
        s.stream.try_clone()
    };
    match server::serve(&mut stream, export, transmission) {
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
