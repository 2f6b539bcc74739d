//! A share from its spec: the virtio-fs device over its directory, and its bound socket.

use std::fs::File;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{FsSpec, FsSpecError, SpecError};
use crate::vhost_user::ShareServer;
use crate::virtio_fs::FsDevice;
use crate::worker::{QueueSettings, WaitMode};

fn bad(key: &str, reason: String) -> FsSpecError {
    FsSpecError(SpecError {
        key: key.into(),
        reason,
    })
}

/// Each queue's settings: the high-priority queue first, then the request queues. The first
/// carries only FORGET and INTERRUPT: it waits for kicks whatever the mode, beside the first
/// request queue.
fn queue_settings(spec: &FsSpec) -> Vec<QueueSettings> {
    (0..=spec.queues)
        .map(|i| QueueSettings {
            mode: if i == 0 { WaitMode::Event } else { spec.mode },
            poll: Duration::from_micros(spec.poll_us),
            cpu: spec.cpus.get(i.saturating_sub(1)).copied(),
            batch: true,
            max_size: spec.queue_size,
        })
        .collect()
}

/// Opens a share's directory and binds its socket (before confinement).
pub(crate) fn build_share(spec: &FsSpec) -> Result<ShareServer, FsSpecError> {
    let queues = u32::try_from(spec.queues).unwrap_or(u32::MAX);
    let device = FsDevice::open(&spec.dir, &spec.tag, queues, spec.readonly)
        .map_err(|e| bad("dir", e.to_string()))?;
    let (mode, group) = (spec.socket_mode, spec.socket_group);
    ShareServer::bind(
        &spec.socket,
        mode,
        group,
        Arc::new(device),
        queue_settings(spec),
    )
    .map_err(|e| bad("socket", e.to_string()))
}

/// What `vbmq ctl add-fs` opened for a share and passed: the directory, the socket it bound
/// and listens on, and the socket's lock file, which it holds.
pub struct PassedShare {
    /// The shared directory.
    pub dir: File,
    /// The listening vhost-user socket.
    pub listener: UnixListener,
    /// The lock file beside the socket.
    pub lock: File,
}

/// Serves a share over what another process opened and bound (a confined vbmq, at run time).
pub(crate) fn build_passed_share(
    spec: &FsSpec,
    passed: PassedShare,
) -> Result<ShareServer, FsSpecError> {
    let queues = u32::try_from(spec.queues).unwrap_or(u32::MAX);
    let device = FsDevice::from_descriptor(passed.dir, &spec.dir, &spec.tag, queues, spec.readonly)
        .map_err(|e| bad("dir", e.to_string()))?;
    Ok(ShareServer::from_listener(
        &spec.socket,
        passed.listener,
        passed.lock,
        Arc::new(device),
        queue_settings(spec),
    ))
}
