//! Changed-block maps of running disks (`track-changes=on`): checkpoints begun, asked for and
//! forgotten by name.

use std::path::Path;
use std::sync::Arc;

use super::{Host, HostError, lock};
use crate::backend::ChangeMap;
use crate::backend::changes::{Changes, Checkpoint};

impl Host {
    /// The change maps of the disk on `socket`.
    pub fn change_map(&self, socket: &Path) -> Result<Arc<ChangeMap>, HostError> {
        let disks = lock(&self.disks);
        let running = disks
            .iter()
            .find(|r| r.spec.socket == socket)
            .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
        running
            .handles
            .changes()
            .ok_or_else(|| HostError::NotTracked(socket.to_path_buf()))
    }

    /// `checkpoint`: starts the map `name` on the disk at this instant.
    pub fn checkpoint(&self, socket: &Path, name: &str) -> Result<(), HostError> {
        self.change_map(socket)?.begin(name)?;
        crate::limited!(info, "{}: checkpoint {name} begun", socket.display());
        Ok(())
    }

    /// `changed-blocks`: the extents written since the map `name` began.
    pub fn changed_blocks(&self, socket: &Path, name: &str) -> Result<Changes, HostError> {
        Ok(self.change_map(socket)?.changed_since(name)?)
    }

    /// `forget-checkpoint`: drops the map `name`.
    pub fn forget_checkpoint(&self, socket: &Path, name: &str) -> Result<(), HostError> {
        self.change_map(socket)?.forget(name)?;
        crate::limited!(info, "{}: checkpoint {name} forgotten", socket.display());
        Ok(())
    }
}

/// The maps of a disk, for `list` (none when it is not tracked).
pub(super) fn checkpoints_of(map: Option<Arc<ChangeMap>>) -> Vec<Checkpoint> {
    map.map(|map| map.checkpoints()).unwrap_or_default()
}
