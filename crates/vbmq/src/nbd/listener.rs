//! An export's listening socket: each client on a thread of its own (never a guest's queue
//! thread), [`MAX_CONNECTIONS`] at most, every one closed when the export ends.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::server::{self, End, Export};

/// Clients served at once; one more is closed at once (each holds up to 32 MiB).
pub const MAX_CONNECTIONS: usize = 16;

/// A running NBD server for one export.
pub struct NbdServer {
    /// An eventfd, written to stop the accepting thread.
    stop: Arc<File>,
    thread: Option<JoinHandle<()>>,
}

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
fn client(mut stream: UnixStream, export: &dyn Export, name: &str) {
    match server::serve(&mut stream, export) {
        Ok(End::Client) => {}
        Ok(End::Protocol(why)) => crate::limited!(info, "{name}: NBD client disconnected: {why}"),
        Err(e) => crate::limited!(info, "{name}: NBD client gone: {e}"),
    }
}
