//! The shares being served, each on a thread of its own until it is
//! removed or the process stops: those `vbmq serve --fs` gives (opened and bound before
//! confinement by [`crate::devices`]) and those `vbmq ctl add-fs` hands over as descriptors.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::config::FsSpec;
use crate::vhost_user::{ShareServer, Stopper, VhostUserFs};
use crate::worker::QueueStats;

/// A share being served: what it is, its counters, how to stop it, and its files to remove.
pub(crate) struct RunningShare {
    /// The parsed `--fs` value.
    pub spec: FsSpec,
    /// The `--fs` text it was given.
    pub text: String,
    /// Each queue's counters, the high-priority queue first.
    pub stats: Vec<Arc<QueueStats>>,
    current: Arc<Mutex<Option<Arc<VhostUserFs>>>>,
    stopper: Stopper,
    files: Vec<PathBuf>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningShare {
    /// Whether a frontend is connected.
    pub fn connected(&self) -> bool {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The share's counters, for SIGUSR1 and the exit log: each queue's requests and passes.
    pub fn report(&self) -> String {
        let mut report = format!("{}:", self.spec.socket.display());
        for (index, queue) in self.stats.iter().enumerate() {
            let passes = queue.passes.load(Ordering::Relaxed);
            let requests = queue.requests.load(Ordering::Relaxed);
            report.push_str(&format!(
                " [queue {index}: requests={requests} passes={passes}]"
            ));
        }
        report
    }

    /// Disconnects the frontend, stops accepting, waits for the serving thread, removes the
    /// socket and lock files (where the confinement lets the process).
    pub fn stop(mut self) {
        self.stopper
            .stop_and_remove(self.thread.take(), || {}, &self.files);
    }
}

/// Serves `server` (the share `spec`, given as `text`) on a thread of its own.
pub(crate) fn start_share(
    server: ShareServer,
    spec: FsSpec,
    text: String,
) -> std::io::Result<RunningShare> {
    let stopper = server.stopper()?;
    let (stats, current, files) = (server.queue_stats(), server.current(), server.files());
    let thread = std::thread::Builder::new()
        .name("vbmq-fs-socket".into())
        .spawn(move || server.run())?;
    Ok(RunningShare {
        spec,
        text,
        stats,
        current,
        stopper,
        files,
        thread: Some(thread),
    })
}

/// A share keeps a descriptor open for every file its guests looked up and have not forgotten
/// (the passthrough's `O_PATH` handles, as virtiofsd's): the process gets as many descriptors as
/// its hard limit allows, as virtiofsd does. (What a guest can still do with them: SECURITY.md.)
pub(crate) fn raise_descriptor_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct passed, nothing else.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let old = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            tracing::info!("descriptor limit raised from {old} to {}", limit.rlim_max);
        }
    }
}
