//! A device's vhost-user socket, whatever the device: bound once beside its lock file, it serves
//! one frontend after another until the process stops or its [`Stopper`] is used. A device's
//! server ([`DiskServer`](super::DiskServer), [`ShareServer`](super::ShareServer)) adds only how
//! it makes a connection's backend and what it takes back when the connection ends.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VhostUserDaemon, VringEpollHandler};
use vm_memory::GuestMemoryAtomic;

use super::connection::lock;
use crate::guest::dirty_log::DirtyLog;
use crate::guest::{GuestMemory, Vring};

/// Why a socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another vbmq holds the socket.
    #[error("{0} is served by another running vbmq")]
    InUse(PathBuf),
    /// The lock file next to the socket cannot be created.
    #[error("cannot lock {0}: {1}")]
    Lock(PathBuf, io::Error),
    /// The socket cannot be bound.
    #[error("cannot listen on {0}: {1}")]
    Listen(PathBuf, String),
    /// A queue's I/O engine cannot be created.
    #[error("cannot create the I/O engine of queue {0}: {1}")]
    Engine(usize, io::Error),
}

/// Stops one device's server from another thread: no new frontend, the connected one drained
/// and closed. The listening socket is shut down through a duplicate of its descriptor, so a
/// late stop never reaches a descriptor number the process has reused.
pub struct Stopper {
    listener: OwnedFd,
    stopped: Arc<AtomicBool>,
    /// Drains and closes the connection being served, if any.
    disconnect: Box<dyn Fn() + Send + Sync>,
}

impl Stopper {
    /// Completes the in-flight I/O of the connected frontend, closes its connection and wakes
    /// the server's accept; the server's thread then returns.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        // SAFETY: shutdown(2) on a descriptor this Stopper owns.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        (self.disconnect)();
    }

    /// Stops the server and waits for its `thread` to return; then runs `closed` (what the
    /// server served is let go) and removes the server's `files`.
    pub fn stop_and_remove(
        &self,
        thread: Option<std::thread::JoinHandle<()>>,
        closed: impl FnOnce(),
        files: &[PathBuf],
    ) {
        self.stop();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        closed();
        for file in files {
            let _ = std::fs::remove_file(file);
        }
    }

    /// A stopper of the server listening on `listener`.
    pub(super) fn new(
        listener: RawFd,
        stopped: Arc<AtomicBool>,
        disconnect: Box<dyn Fn() + Send + Sync>,
    ) -> io::Result<Self> {
        Ok(Stopper {
            listener: dup_descriptor(listener)?,
            stopped,
            disconnect,
        })
    }
}

fn take_lock(path: &Path) -> Result<File, SocketError> {
    let file = crate::socket_files::open_lock_file(path)
        .map_err(|e| SocketError::Lock(path.to_path_buf(), e))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(SocketError::InUse(path.with_extension("")));
    }
    Ok(file)
}

/// Binds `socket` (and creates its directory, 0755, if it is missing), replacing a stale socket
/// file but not one a live vbmq holds: that is kept out by the lock file beside it, returned
/// with its path, to hold while serving.
pub(super) fn listen(
    socket: &Path,
    mode: u32,
    group: Option<u32>,
) -> Result<(Listener, File, PathBuf), SocketError> {
    // The socket's directory, 0755, if it is missing (a fresh /run/vbmq, say).
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| SocketError::Listen(socket.to_path_buf(), e.to_string()))?;
    }
    let mut lock_name = socket.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock_path = PathBuf::from(lock_name);
    let lock = take_lock(&lock_path).map_err(|e| match e {
        SocketError::InUse(_) => SocketError::InUse(socket.to_path_buf()),
        other => other,
    })?;
    // Owner-only until it has its group and mode, and only then at its path.
    let listener = crate::socket_files::bind_listener(socket, mode, group)
        .map_err(|e| SocketError::Listen(socket.to_path_buf(), e.to_string()))?;
    Ok((Listener::from(listener), lock, lock_path))
}

/// Serves one frontend after another with `serve_one` until `stopped` is set; a failure is
/// logged and retried after a pause (accepting may keep failing).
pub(super) fn serve_until_stopped(
    socket: &Path,
    stopped: &AtomicBool,
    mut serve_one: impl FnMut() -> Result<(), String>,
) {
    while !stopped.load(Ordering::Acquire) {
        let result = serve_one();
        if stopped.load(Ordering::Acquire) {
            break;
        }
        if let Err(e) = result {
            crate::limited!(error, "{}: {e}", socket.display());
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

fn dup_descriptor(fd: std::os::fd::RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller keeps open; the new descriptor is
    // owned by the returned OwnedFd alone.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor nothing else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

/// A connection's backend, as its socket server drives it.
pub(super) trait ConnectionBackend:
    VhostUserBackend<Bitmap = DirtyLog, Vring = Vring> + Sized + Send + Sync + 'static
{
    /// Gives the backend the epoll handlers of its daemon.
    fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<Self>>>>);
    /// Gives the backend a way to close its connection, once the daemon accepted a frontend.
    fn connected(&self, handle: Option<ShutdownHandle>);
    /// Completes what is in flight and closes the connection (the device is being stopped).
    fn disconnect(&self);
    /// Ends the connection: stops the queues, drops the daemon (which joins its threads) and
    /// only then closes the exit eventfds they polled.
    fn end(&self, daemon: VhostUserDaemon<Arc<Self>>);
}

/// A bound socket and the connection it serves.
pub(super) struct BoundSocket<B> {
    socket: PathBuf,
    /// The socket file and its lock file, removed with the device (none for a socket another
    /// process bound and keeps).
    files: Vec<PathBuf>,
    /// Held while serving: a second vbmq cannot take the socket (none for an inherited one).
    _lock: Option<File>,
    listener: Listener,
    /// The connection being served, to be closed on shutdown.
    current: Arc<Mutex<Option<Arc<B>>>>,
    /// Set when the device is stopped: no frontend is accepted any more.
    stopped: Arc<AtomicBool>,
}

impl<B: ConnectionBackend> BoundSocket<B> {
    /// Binds `socket` (see [`listen`]).
    pub fn bind(socket: &Path, mode: u32, group: Option<u32>) -> Result<Self, SocketError> {
        let (listener, lock, lock_path) = listen(socket, mode, group)?;
        Ok(Self::serving(socket, listener, Some((lock, lock_path))))
    }

    /// Serves on `listener`, a socket another process bound (passed over the control socket,
    /// or inherited at start), known as `socket`. With its `lock` file (and the lock file's
    /// path), the two files are the device's to remove; without, they are the binder's.
    pub fn adopt(
        socket: &Path,
        listener: std::os::unix::net::UnixListener,
        lock: Option<(File, PathBuf)>,
    ) -> Self {
        Self::serving(socket, Listener::from(listener), lock)
    }

    fn serving(socket: &Path, listener: Listener, lock: Option<(File, PathBuf)>) -> Self {
        let (lock, files) = match lock {
            Some((lock, lock_path)) => (Some(lock), vec![socket.to_path_buf(), lock_path]),
            None => (None, Vec::new()),
        };
        BoundSocket {
            socket: socket.to_path_buf(),
            files,
            _lock: lock,
            listener,
            current: Arc::new(Mutex::new(None)),
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.socket
    }

    /// A handle to the connection being served, for shutdown.
    pub fn current(&self) -> Arc<Mutex<Option<Arc<B>>>> {
        self.current.clone()
    }

    /// A way to stop the server from another thread.
    pub fn stopper(&self) -> io::Result<Stopper> {
        let current = self.current.clone();
        let disconnect = move || {
            if let Some(backend) = lock(&current).clone() {
                backend.disconnect();
            }
        };
        Stopper::new(
            self.listener.as_raw_fd(),
            self.stopped.clone(),
            Box::new(disconnect),
        )
    }

    /// The socket file and its lock file, to remove at exit (none for a socket another
    /// process bound and keeps).
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    /// Serves frontends one after another, until stopped: each with the backend `connection`
    /// makes, handed to `ended` once its connection has ended (even one that failed to start).
    pub fn run(
        &mut self,
        name: &str,
        mut connection: impl FnMut() -> Arc<B>,
        mut ended: impl FnMut(&B),
    ) {
        let (socket, stopped) = (self.socket.clone(), self.stopped.clone());
        serve_until_stopped(&socket, &stopped, || {
            let backend = connection();
            let result = self.serve_one(name, &backend);
            ended(&backend);
            result
        });
    }

    fn serve_one(&mut self, name: &str, backend: &Arc<B>) -> Result<(), String> {
        let atomic_mem = GuestMemoryAtomic::new(GuestMemory::new());
        let mut daemon = VhostUserDaemon::new(name.to_string(), backend.clone(), atomic_mem)
            .map_err(|e| format!("cannot create the vhost-user daemon: {e}"))?;
        backend.attach(daemon.get_epoll_handlers());
        let result = daemon
            .start(&mut self.listener)
            .map_err(|e| format!("cannot accept a frontend: {e}"));
        if result.is_ok() {
            backend.connected(daemon.shutdown_handle());
            crate::limited!(info, "{}: frontend connected", self.socket.display());
            *lock(&self.current) = Some(backend.clone());
            // A stop between the accept and the line above found no connection to close.
            if self.stopped.load(Ordering::Acquire) {
                backend.disconnect();
            }
            if let Err(e) = daemon.wait() {
                crate::limited!(info, "{}: connection ended: {e}", self.socket.display());
            }
            crate::limited!(info, "{}: frontend disconnected", self.socket.display());
        }
        *lock(&self.current) = None;
        backend.end(daemon);
        result
    }
}
