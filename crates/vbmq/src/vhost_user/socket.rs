//! A disk's vhost-user socket: bound once, it serves one frontend after another until the
//! process stops or its [`Stopper`] is used.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::guest::GuestMemory;
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::GuestMemoryAtomic;

use super::VhostUserBlk;
use crate::backend::{Disk, Engine};
use crate::virtio_blk::BlkDevice;
use crate::worker::{QueueSettings, QueueStats};

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

/// One disk on one socket.
pub struct DiskServer {
    socket: PathBuf,
    /// The socket file and its lock file, removed with the disk (none for a passed socket).
    files: Vec<PathBuf>,
    /// Held for the process lifetime: a second vbmq cannot take the socket.
    _lock: Option<File>,
    listener: Listener,
    device: Arc<BlkDevice>,
    disk: Arc<dyn Disk>,
    settings: Vec<QueueSettings>,
    /// Counters of each queue, kept across connections.
    stats: Vec<Arc<QueueStats>>,
    /// Each queue's engine, created here, before confinement (no ring can be created after),
    /// lent to each connection's workers and taken back when it ends.
    engines: Vec<Option<Box<dyn Engine>>>,
    /// The connection being served, to be quiesced on shutdown.
    current: Arc<Mutex<Option<Arc<VhostUserBlk>>>>,
    /// Set when the disk is removed: no frontend is accepted any more.
    stopped: Arc<AtomicBool>,
    /// Offer in-flight tracking to frontends.
    inflight: bool,
}

/// Stops one [`DiskServer`] from another thread: no new frontend, the connected one drained
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

/// Each queue's engine, created before the socket is served.
fn engines(
    disk: &dyn Disk,
    settings: &[QueueSettings],
) -> Result<Vec<Option<Box<dyn Engine>>>, SocketError> {
    settings
        .iter()
        .enumerate()
        .map(|(i, s)| {
            disk.engine(s.engine_options())
                .map(Some)
                .map_err(|e| SocketError::Engine(i, e))
        })
        .collect()
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

impl DiskServer {
    /// Binds `socket`, replacing a stale socket file but not one a live vbmq holds.
    pub fn bind(
        socket: &Path,
        mode: u32,
        group: Option<u32>,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        let engines = engines(disk.as_ref(), &settings)?;
        let (listener, lock, lock_path) = listen(socket, mode, group)?;
        let files = vec![socket.to_path_buf(), lock_path];
        Ok(Self::new(
            socket,
            files,
            Some(lock),
            listener,
            device,
            disk,
            settings,
            engines,
        ))
    }

    /// Serves on `listener`, a socket bound and passed by a client (see `crate::passed_fds`),
    /// known as `socket`: no lock file, and its file is the client's to remove.
    pub fn with_listener(
        socket: &Path,
        listener: std::os::unix::net::UnixListener,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        let engines = engines(disk.as_ref(), &settings)?;
        let listener = Listener::from(listener);
        Ok(Self::new(
            socket,
            Vec::new(),
            None,
            listener,
            device,
            disk,
            settings,
            engines,
        ))
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        socket: &Path,
        files: Vec<PathBuf>,
        lock: Option<File>,
        listener: Listener,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: Vec<QueueSettings>,
        engines: Vec<Option<Box<dyn Engine>>>,
    ) -> Self {
        DiskServer {
            socket: socket.to_path_buf(),
            files,
            _lock: lock,
            listener,
            device,
            disk,
            stats: settings.iter().map(|_| Arc::default()).collect(),
            engines,
            settings,
            current: Arc::new(Mutex::new(None)),
            stopped: Arc::new(AtomicBool::new(false)),
            inflight: true,
        }
    }

    /// A handle to the connection being served, for shutdown.
    pub fn current(&self) -> Arc<Mutex<Option<Arc<VhostUserBlk>>>> {
        self.current.clone()
    }

    /// A report of the disk's counters, for the log: each queue's, then the engine's.
    pub fn stats_reporter(&self) -> impl Fn() -> String + Send + 'static {
        let (socket, stats, disk) = (self.socket.clone(), self.stats.clone(), self.disk.clone());
        move || {
            let mut report = format!("{}:", socket.display());
            for (index, queue) in stats.iter().enumerate() {
                report.push_str(&format!(" [queue {index}: {}]", queue.summary()));
            }
            for (name, value) in disk.stats() {
                report.push_str(&format!(" {name}={value}"));
            }
            report
        }
    }

    /// A way to stop this server from another thread.
    pub fn stopper(&self) -> io::Result<Stopper> {
        let current = self.current.clone();
        let disconnect = move || {
            let backend = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(backend) = backend {
                backend.disconnect();
            }
        };
        Stopper::new(
            self.listener.as_raw_fd(),
            self.stopped.clone(),
            Box::new(disconnect),
        )
    }

    /// The counters of each queue.
    pub fn queue_stats(&self) -> Vec<Arc<QueueStats>> {
        self.stats.clone()
    }

    /// The device the guests see (its capacity changes with a resize).
    pub fn device(&self) -> Arc<BlkDevice> {
        self.device.clone()
    }

    /// The socket file and its lock file, to remove at exit (none for a passed socket).
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.clone()
    }

    /// Whether frontends are offered in-flight tracking (on unless turned off).
    pub fn track_inflight(mut self, on: bool) -> Self {
        self.inflight = on;
        self
    }

    /// Serves frontends one after another, until stopped.
    pub fn run(mut self) {
        let (socket, stopped) = (self.socket.clone(), self.stopped.clone());
        serve_until_stopped(&socket, &stopped, || self.serve_one());
    }

    fn serve_one(&mut self) -> Result<(), String> {
        let atomic_mem = GuestMemoryAtomic::new(GuestMemory::new());
        let backend = Arc::new(
            VhostUserBlk::new(
                self.device.clone(),
                self.disk.clone(),
                &self.settings,
                &self.stats,
            )
            .with_inflight_tracking(self.inflight),
        );
        let mut daemon = VhostUserDaemon::new("vbmq".to_string(), backend.clone(), atomic_mem)
            .map_err(|e| format!("cannot create the vhost-user daemon: {e}"))?;
        backend.attach(daemon.get_epoll_handlers());
        backend.lend_engines(std::mem::take(&mut self.engines));
        let result = daemon
            .start(&mut self.listener)
            .map_err(|e| format!("cannot accept a frontend: {e}"));
        if result.is_ok() {
            backend.connected(daemon.shutdown_handle());
            crate::limited!(info, "{}: frontend connected", self.socket.display());
            *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(backend.clone());
            // A stop between the accept and the line above found no connection to close.
            if self.stopped.load(Ordering::Acquire) {
                backend.disconnect();
            }
            if let Err(e) = daemon.wait() {
                crate::limited!(info, "{}: connection ended: {e}", self.socket.display());
            }
            crate::limited!(info, "{}: frontend disconnected", self.socket.display());
        }
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        backend.end(daemon);
        self.engines = backend.take_engines();
        result
    }
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
