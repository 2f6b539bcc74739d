//! The directories `vbmq serve --fs` shares (each opened and bound before confinement by
//! [`crate::devices`]): served on a thread of its own, stopped at exit.

use std::path::PathBuf;

use crate::vhost_user::{ShareServer, Stopper};

/// A share being served: how to stop it, and its files to remove.
pub(crate) struct RunningShare {
    stopper: Stopper,
    /// The share's counters, for SIGUSR1 and the exit log.
    pub report: Box<dyn Fn() -> String + Send>,
    files: Vec<PathBuf>,
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
