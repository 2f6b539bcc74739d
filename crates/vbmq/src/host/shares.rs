//! The shares the host serves beside its disks: listed, counted, reported and stopped as disks
//! are, under the same socket names.

use std::path::{Path, PathBuf};

use super::{DiskCounters, DiskInfo, Host, HostError, counters, lock};
use crate::config::FsSpec;
use crate::shares::{RunningShare, start_share};
use crate::vhost_user::ShareServer;

/// What a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A virtio-blk disk (`--disk`).
    Disk,
    /// A virtio-fs share (`--fs`).
    Fs,
}

impl DeviceKind {
    /// `disk` or `fs`, as the control protocol and the metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Disk => "disk",
            DeviceKind::Fs => "fs",
        }
    }
}

/// One share as `list` shows it.
#[derive(Clone, Debug)]
pub struct ShareInfo {
    /// The vhost-user socket: the share's name.
    pub socket: PathBuf,
    /// The `--fs` text it was given.
    pub spec: String,
    /// The tag the guest mounts.
    pub tag: String,
    /// The shared directory, as the spec names it.
    pub dir: PathBuf,
    /// Request queues (the high-priority queue comes on top).
    pub queues: usize,
    /// Whether every change is refused.
    pub readonly: bool,
    /// Whether a frontend is connected.
    pub connected: bool,
}

/// One device as `list` shows it.
#[derive(Clone, Debug)]
pub enum DeviceInfo {
    /// A disk.
    Disk(DiskInfo),
    /// A share.
    Share(ShareInfo),
}

fn share_info(share: &RunningShare) -> ShareInfo {
    ShareInfo {
        socket: share.spec.socket.clone(),
        spec: share.text.clone(),
        tag: share.spec.tag.clone(),
        dir: share.spec.dir.clone(),
        queues: share.spec.queues,
        readonly: share.spec.readonly,
        connected: share.connected(),
    }
}

impl Host {
    /// Serves a share, opened and bound already, on its own thread; `text` is its `--fs` value.
    pub fn start_share(
        &self,
        server: ShareServer,
        spec: FsSpec,
        text: String,
    ) -> Result<ShareInfo, HostError> {
        let mut shares = lock(&self.shares);
        let share = start_share(server, spec, text)
            .map_err(|e| HostError::Start(format!("cannot start a share: {e}")))?;
        let info = share_info(&share);
        shares.push(share);
        Ok(info)
    }

    /// `list`: every disk, then every share, each in the order added.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let disks = self.list().into_iter().map(DeviceInfo::Disk);
        let shares = lock(&self.shares)
            .iter()
            .map(|share| DeviceInfo::Share(share_info(share)))
            .collect::<Vec<_>>();
        disks.chain(shares).collect()
    }

    /// `remove-fs`: disconnects the share's frontend, stops its socket, removes its files.
    pub fn remove_share(&self, socket: &Path) -> Result<(), HostError> {
        let share = {
            let mut shares = lock(&self.shares);
            let index = shares
                .iter()
                .position(|s| s.spec.socket == socket)
                .ok_or_else(|| HostError::NoSuchShare(socket.to_path_buf()))?;
            shares.remove(index)
        };
        lock(&self.other_sockets).retain(|(_, path)| path != socket);
        share.stop();
        crate::limited!(info, "{}: share removed", socket.display());
        Ok(())
    }

    /// The counters of every share, or of the one on `socket` (none if no share has it).
    pub(super) fn share_counters(&self, socket: Option<&Path>) -> Vec<DiskCounters> {
        lock(&self.shares)
            .iter()
            .filter(|share| socket.is_none_or(|s| share.spec.socket == s))
            .map(|share| DiskCounters {
                socket: share.spec.socket.clone(),
                kind: DeviceKind::Fs,
                queues: share.stats.iter().map(|q| counters(q)).collect(),
                engine: Vec::new(),
            })
            .collect()
    }

    /// One line per share for the log.
    pub(super) fn share_reports(&self) -> Vec<String> {
        lock(&self.shares)
            .iter()
            .map(RunningShare::report)
            .collect()
    }

    /// Stops every share (at exit).
    pub(super) fn stop_shares(&self) {
        let shares = std::mem::take(&mut *lock(&self.shares));
        for share in shares {
            share.stop();
        }
    }
}
