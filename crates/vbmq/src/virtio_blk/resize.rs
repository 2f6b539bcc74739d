//! Resizing the storage under a device that serves it.

use std::time::Duration;

use super::BlkDevice;
use crate::backend::Disk;

/// Gives `disk` `bytes` (`shrink`: even fewer than it has) and `device` the capacity it got.
/// Shrinking, requests past the new end are refused first, and the writes already in flight
/// waited for (at most `wait`) before the storage is cut: done after the cut, they would grow
/// the file again. A shrink they outlast is not done.
pub fn resize_disk(
    device: &BlkDevice,
    disk: &dyn Disk,
    bytes: u64,
    shrink: bool,
    wait: Duration,
) -> Result<u64, String> {
    let before = device.capacity();
    device.set_capacity(before.min(bytes));
    if bytes < before && !device.writes.wait_for_older(wait) {
        device.set_capacity(before);
        return Err(format!(
            "writes in flight did not complete within {} s: not shrunk",
            wait.as_secs()
        ));
    }
    match disk.resize(bytes, shrink) {
        Ok(now) => {
            device.set_capacity(now);
            Ok(now)
        }
        Err(e) => {
            device.set_capacity(before);
            Err(e.to_string())
        }
    }
}
