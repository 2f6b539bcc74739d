//! vbmq: a multi-queue vhost-user-blk backend built on the VBMq design — one dedicated,
//! pinned I/O thread per virtqueue, batched io_uring submission, polling or event-driven.
//!
//! The layers, from the socket down:
//! - [`vhost_user`]: the vhost-user glue (socket, `VhostUserBackend`),
//! - [`worker`]: the per-queue I/O thread,
//! - [`virtio_blk`]: parsing guest requests into validated [`virtio_blk::Request`]s,
//! - [`backend`]: the storage engines (io_uring on files and block devices, null).

#![deny(missing_docs)]

pub mod backend;
pub mod config;
pub mod confine;
mod devices;
pub mod guest;
pub mod host;
pub mod limits;
pub mod log_limit;
pub mod serve;
mod shares;
pub mod socket_files;
pub mod systemd;
#[cfg(any(test, feature = "test-utils"))]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // Test inputs are cut to size.
pub mod test_utils;
pub mod timer;
pub mod vhost_user;
pub mod virtio_blk;
pub mod virtio_fs;
pub mod worker;

#[cfg(not(target_pointer_width = "64"))]
compile_error!("vbmq needs a 64-bit host: disk offsets and guest sizes are used as host sizes");

/// A disk offset or length as a host size: lossless on the 64-bit hosts vbmq builds for.
#[allow(clippy::cast_possible_truncation)]
pub(crate) const fn host_size(n: u64) -> usize {
    n as usize
}
