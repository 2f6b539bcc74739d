//! The directories `vbmq serve --fs` shares: each opened and bound before confinement, served
//! on a thread of its own, stopped at exit.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{FsSpec, FsSpecError, SpecError};
use crate::vhost_user::{ShareServer, Stopper};
use crate::virtio_fs::FsDevice;
use crate::worker::{QueueSettings, WaitMode};

/// Opens a share's directory and binds its socket (before confinement).
pub(crate) fn build_share(spec: &FsSpec) -> Result<ShareServer, FsSpecError> {
    let bad = |key: &str, reason: String| {
        FsSpecError(SpecError {
            key: key.into(),
            reason,
        })
    };
    let queues = u32::try_from(spec.queues).unwrap_or(u32::MAX);
    let device = FsDevice::open(&spec.dir, &spec.tag, queues, spec.readonly)
        .map_err(|e| bad("dir", e.to_string()))?;
    // The high-priority queue first, then the request queues. The first carries only FORGET
    // and INTERRUPT: it waits for kicks whatever the mode, beside the first request queue.
    let settings = (0..=spec.queues)
        .map(|i| QueueSettings {
            mode: if i == 0 { WaitMode::Event } else { spec.mode },
            poll: Duration::from_micros(spec.poll_us),
            cpu: spec.cpus.get(i.saturating_sub(1)).copied(),
            batch: true,
            max_size: spec.queue_size,
        })
        .collect();
    let (mode, group) = (spec.socket_mode, spec.socket_group);
    ShareServer::bind(&spec.socket, mode, group, Arc::new(device), settings)
        .map_err(|e| bad("socket", e.to_string()))
}

/// A share being served: how to stop it, and its files to remove.
pub(crate) struct RunningShare {
    stopper: Stopper,
    /// The share's counters, for SIGUSR1 and the exit log.
    pub report: Box<dyn Fn() -> String + Send>,
    files: [PathBuf; 2],
    thread: std::thread::JoinHandle<()>,
}

pub(crate) fn start_share(server: ShareServer) -> std::io::Result<RunningShare> {
    let stopper = server.stopper()?;
    let report = Box::new(server.stats_reporter());
    let files = server.files();
    let thread = std::thread::Builder::new()
        .name("vbmq-fs-socket".into())
        .spawn(move || server.run())?;
    Ok(RunningShare {
        stopper,
        report,
        files,
        thread,
    })
}

pub(crate) fn stop_shares(shares: Vec<RunningShare>) {
    for share in shares {
        share
            .stopper
            .stop_and_remove(Some(share.thread), || {}, &share.files);
    }
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
