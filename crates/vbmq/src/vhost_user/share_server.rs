//! A shared directory's vhost-user socket: bound once, it serves one frontend after another
//! until the process stops or its [`Stopper`] is used.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::GuestMemoryAtomic;

use super::connection::lock;
use super::socket::{listen, serve_until_stopped};
use super::{SocketError, Stopper, VhostUserFs};
use crate::guest::GuestMemory;
use crate::virtio_fs::FsDevice;
use crate::worker::{QueueSettings, QueueStats};

/// One shared directory on one socket.
pub struct ShareServer {
    socket: PathBuf,
    /// The lock file beside a socket vbmq bound itself (none on an inherited one), held while
    /// serving: a second vbmq cannot take the socket.
    lock: Option<(File, PathBuf)>,
    listener: Listener,
    device: Arc<FsDevice>,
    settings: Vec<QueueSettings>,
    /// Counters of each queue, kept across connections.
    stats: Vec<Arc<QueueStats>>,
    /// The connection being served, to be closed on shutdown.
    current: Arc<Mutex<Option<Arc<VhostUserFs>>>>,
    /// Set when the share is stopped: no frontend is accepted any more.
    stopped: Arc<AtomicBool>,
}

impl ShareServer {
    /// Binds `socket` for `device`, with one entry of `settings` per queue (the high-priority
    /// queue first).
    pub fn bind(
        socket: &Path,
        mode: u32,
        group: Option<u32>,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        let (listener, lock, lock_path) = listen(socket, mode, group)?;
        Ok(Self::serving(
            socket,
            Some((lock, lock_path)),
            listener,
            device,
            settings,
        ))
    }

    /// Serves `device` on `listener`, a listening socket bound by whoever started vbmq
    /// (virtiofsd's `--fd`); `name` names it in the log. Nothing is removed at exit.
    pub fn inherited(
        name: &Path,
        listener: std::os::unix::net::UnixListener,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Self {
        Self::serving(name, None, Listener::from(listener), device, settings)
    }

    fn serving(
        socket: &Path,
        lock: Option<(File, PathBuf)>,
        listener: Listener,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Self {
        ShareServer {
            socket: socket.to_path_buf(),
            lock,
            listener,
            device,
            stats: settings.iter().map(|_| Arc::default()).collect(),
            settings,
            current: Arc::new(Mutex::new(None)),
            stopped: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Serves `device` on `listener`, a socket another process bound at `socket` and passed
    /// (with `lock`, the lock file beside it, held while serving): a confined vbmq binds nothing.
    pub fn from_listener(
        socket: &Path,
        listener: std::os::unix::net::UnixListener,
        lock: File,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Self {
        let mut lock_name = socket.as_os_str().to_owned();
        lock_name.push(".lock");
        Self::serving(
            socket,
            Some((lock, PathBuf::from(lock_name))),
            Listener::from(listener),
            device,
            settings,
        )
    }

    /// A way to stop this server from another thread.
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

    /// The counters of each queue (the high-priority queue first), kept across connections.
    pub fn queue_stats(&self) -> Vec<Arc<QueueStats>> {
        self.stats.clone()
    }

    /// A handle to the connection being served (`None`: no frontend).
    pub fn current(&self) -> Arc<Mutex<Option<Arc<VhostUserFs>>>> {
        self.current.clone()
    }

    /// The socket file and its lock file, to remove at exit (none for an inherited socket).
    pub fn files(&self) -> Vec<PathBuf> {
        match &self.lock {
            Some((_, lock_path)) => vec![self.socket.clone(), lock_path.clone()],
            None => Vec::new(),
        }
    }

    /// Serves frontends one after another, until stopped.
    pub fn run(mut self) {
        let (socket, stopped) = (self.socket.clone(), self.stopped.clone());
        serve_until_stopped(&socket, &stopped, || self.serve_one());
    }

    fn serve_one(&mut self) -> Result<(), String> {
        let backend = Arc::new(VhostUserFs::new(
            self.device.clone(),
            &self.settings,
            &self.stats,
        ));
        let atomic_mem = GuestMemoryAtomic::new(GuestMemory::new());
        let mut daemon = VhostUserDaemon::new("vbmq-fs".to_string(), backend.clone(), atomic_mem)
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
        // The queue threads are gone: the next frontend starts a session of its own.
        self.device.end_session();
        result
    }
}
