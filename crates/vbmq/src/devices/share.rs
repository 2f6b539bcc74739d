//! A share from its spec: the virtio-fs device over its directory, and its bound socket.

use std::sync::Arc;
use std::time::Duration;

use crate::config::{FsSpec, FsSpecError, SpecError};
use crate::vhost_user::ShareServer;
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
        .map_err(|e| bad("dir", e.to_string()))?
        .with_migration_on_error(spec.migration_on_error);
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
