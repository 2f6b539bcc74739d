//! A shared directory's vhost-user socket: bound once, it serves one frontend after another
//! until the process stops or its [`Stopper`] is used.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Binds `socket` for `device`, with one entry of `settings` per queue (the high-priority
    /// queue first).
    pub fn bind(
        socket: &Path,
        mode: u32,
        group: Option<u32>,
        device: Arc<FsDevice>,
        settings: Vec<QueueSettings>,
    ) -> Result<Self, SocketError> {
        Ok(ShareServer {
            bound: BoundSocket::bind(socket, mode, group)?,
            device,
            stats: settings.iter().map(|_| Arc::default()).collect(),
            settings,
        })
    }

    /// A way to stop this server from another thread.
    pub fn stopper(&self) -> io::Result<Stopper> {
        self.bound.stopper()
    }

    /// A report of the share's counters, for the log: each queue's requests and passes.
    pub fn stats_reporter(&self) -> impl Fn() -> String + Send + 'static {
        let (socket, stats) = (self.bound.path().to_path_buf(), self.stats.clone());
        move || {
            let mut report = format!("{}:", socket.display());
            for (index, queue) in stats.iter().enumerate() {
                let passes = queue.passes.load(std::sync::atomic::Ordering::Relaxed);
                let requests = queue.requests.load(std::sync::atomic::Ordering::Relaxed);
                report.push_str(&format!(
                    " [queue {index}: requests={requests} passes={passes}]"
                ));
            }
            report
        }
    }

    /// The socket file and its lock file, to remove at exit.
    pub fn files(&self) -> [PathBuf; 2] {
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
