//! A disk's vhost-user socket: bound once, it serves one frontend after another until the
//! process stops or its [`Stopper`] is used; each connection's workers borrow the engines
//! created before the process was confined.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::socket::BoundSocket;
use super::{SocketError, Stopper, VhostUserBlk};
use crate::backend::{Disk, Engine};
use crate::virtio_blk::BlkDevice;
use crate::worker::{QueueSettings, QueueStats};

/// One disk on one socket.
pub struct DiskServer {
    bound: BoundSocket<VhostUserBlk>,
    device: Arc<BlkDevice>,
    disk: Arc<dyn Disk>,
    settings: Vec<QueueSettings>,
    /// Counters of each queue, kept across connections.
    stats: Vec<Arc<QueueStats>>,
    /// Each queue's engine, created here, before confinement (no ring can be created after),
    /// lent to each connection's workers and taken back when it ends.
    engines: Vec<Option<Box<dyn Engine>>>,
    /// Offer in-flight tracking to frontends.
    inflight: bool,
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
        let bound = BoundSocket::bind(socket, mode, group)?;
        Ok(Self::serving(bound, device, disk, settings, engines))
    }

    /// Serves on `listener`, a socket bound and passed by a client (see `crate::passed_fds`) or
    /// inherited at start, known as `socket`: no lock file, and its file is the binder's.
    pub fn with_listener(
        socket: &Path,
        listener: std::os::unix::net::UnixListener,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        let engines = engines(disk.as_ref(), &settings)?;
        let bound = BoundSocket::adopt(socket, listener, None);
        Ok(Self::serving(bound, device, disk, settings, engines))
    }

    fn serving(
        bound: BoundSocket<VhostUserBlk>,
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: Vec<QueueSettings>,
        engines: Vec<Option<Box<dyn Engine>>>,
    ) -> Self {
        DiskServer {
            bound,
            device,
            disk,
            stats: settings.iter().map(|_| Arc::default()).collect(),
            engines,
            settings,
            inflight: true,
        }
    }

    /// A handle to the connection being served, for shutdown.
    pub fn current(&self) -> Arc<Mutex<Option<Arc<VhostUserBlk>>>> {
        self.bound.current()
    }

    /// A report of the disk's counters, for the log: each queue's, then the engine's.
    pub fn stats_reporter(&self) -> impl Fn() -> String + Send + 'static {
        let socket = self.bound.path().to_path_buf();
        let (stats, disk) = (self.stats.clone(), self.disk.clone());
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
        self.bound.stopper()
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
        self.bound.files()
    }

    /// Whether frontends are offered in-flight tracking (on unless turned off).
    pub fn track_inflight(mut self, on: bool) -> Self {
        self.inflight = on;
        self
    }

    /// Serves frontends one after another, until stopped.
    pub fn run(self) {
        let DiskServer {
            mut bound,
            device,
            disk,
            settings,
            stats,
            engines,
            inflight,
        } = self;
        let engines = std::cell::RefCell::new(engines);
        bound.run(
            "vbmq",
            || {
                let backend = VhostUserBlk::new(device.clone(), disk.clone(), &settings, &stats)
                    .with_inflight_tracking(inflight);
                backend.lend_engines(std::mem::take(&mut *engines.borrow_mut()));
                Arc::new(backend)
            },
            // Taken back once the connection has ended, for the next one.
            |backend| *engines.borrow_mut() = backend.take_engines(),
        );
    }
}
