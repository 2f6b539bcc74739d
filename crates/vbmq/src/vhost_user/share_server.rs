//! A shared directory's vhost-user socket: bound once, it serves one frontend after another
//! until the process stops or its [`Stopper`] is used.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::socket::BoundSocket;
use super::{SocketError, Stopper, VhostUserFs};
use crate::virtio_fs::FsDevice;
use crate::worker::{QueueSettings, QueueStats};

/// One shared directory on one socket.
pub struct ShareServer {
    bound: BoundSocket<VhostUserFs>,
    device: Arc<FsDevice>,
    settings: Vec<QueueSettings>,
    /// Counters of each queue, kept across connections.
    stats: Vec<Arc<QueueStats>>,
}

impl ShareServer {
    /// The shared directory, as the share holds it for its life.
    pub fn root(&self) -> &std::fs::File {
        self.device.root()
    }

    /// Binds `socket` for `device`, with one entry of `settings` per queue (the high-priority
    /// queue first).
    pub fn bind(
        socket: &Path,
        mode: u32,
        group: Option<u32>,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        let bound = BoundSocket::bind(socket, mode, group)?;
        Ok(Self::serving(bound, device, settings))
    }

    /// Serves `device` on `listener`, a listening socket bound by whoever started vbmq
    /// (virtiofsd's `--fd`); `name` names it in the log. Nothing is removed at exit.
    pub fn inherited(
        name: &Path,
        listener: std::os::unix::net::UnixListener,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Self {
        Self::serving(BoundSocket::adopt(name, listener, None), device, settings)
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
        let lock = Some((lock, PathBuf::from(lock_name)));
        Self::serving(BoundSocket::adopt(socket, listener, lock), device, settings)
    }

    fn serving(
        bound: BoundSocket<VhostUserFs>,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Self {
        ShareServer {
            bound,
            device,
            stats: settings.iter().map(|_| Arc::default()).collect(),
            settings,
        }
    }

    /// A way to stop this server from another thread.
    pub fn stopper(&self) -> io::Result<Stopper> {
        self.bound.stopper()
    }

    /// The counters of each queue (the high-priority queue first), kept across connections.
    pub fn queue_stats(&self) -> Vec<Arc<QueueStats>> {
        self.stats.clone()
    }

    /// A handle to the connection being served (`None`: no frontend).
    pub fn current(&self) -> Arc<Mutex<Option<Arc<VhostUserFs>>>> {
        self.bound.current()
    }

    /// The socket file and its lock file, to remove at exit (none for an inherited socket).
    pub fn files(&self) -> Vec<PathBuf> {
        self.bound.files()
    }

    /// Serves frontends one after another, until stopped.
    pub fn run(self) {
        let ShareServer {
            mut bound,
            device,
            settings,
            stats,
        } = self;
        bound.run(
            "vbmq-fs",
            || Arc::new(VhostUserFs::new(device.clone(), &settings, &stats)),
            // The queue threads are gone: the next frontend starts a session of its own.
            |_| device.end_session(),
        );
    }
}
