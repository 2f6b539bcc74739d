//! vbmq: a multi-queue vhost-user-blk and vhost-user-fs backend built on the VBMq design — one
//! dedicated, pinned I/O thread per virtqueue, batched io_uring submission, polling or
//! event-driven.
//!
//! The modules in layers, bottom to top; a module imports only from the layers below it (and
//! from helpers to the side), never from above (`scripts/import-graph.py` checks it in
//! `scripts/test.sh`: no circle, at most one arrow running back up):
//! - helpers to the side: [`log_limit`], [`timer`] (the clock and a timerfd), [`socket_files`],
//!   [`systemd`], [`confine`] (Landlock, seccomp, io_uring restrictions),
//! - [`guest`]: guest memory (the checked memory table, its fault guard, the dirty log, the
//!   in-flight record),
//! - [`limits`]: the I/O limits' token buckets, held by a device and waited out by its queues,
//! - [`backend`]: a disk's storage (io_uring on files and block devices, thin `base=` disks,
//!   RBD, memory, null) and the layers stacked on it, each a small type over the disk below
//!   (`backend/layer`: `Layer` and `Layered` forward what a layer does not change, `Stage` is a
//!   layer's queue engine): the snapshot layer, changed-block tracking, encryption, the read
//!   cache, `discard=off`, and the test delay,
//! - [`worker`]: the per-queue I/O threads and the shared per-CPU pollers, which run any
//!   device's queues through its handler,
//! - [`virtio_blk`], [`virtio_fs`]: the device models (a guest request parsed and validated, a
//!   disk's queue handler; a share's FUSE server),
//! - [`vhost_user`]: the transport (the `VhostUserBackend` glue and the socket servers),
//! - [`config`]: the `--disk` and `--fs` specs, and a disk's stack as data (`StackSpec`: its
//!   storage and ordered layers, and the files they need),
//! - `devices`: building a disk (its stack, in one loop, with handles on the verbs only one
//!   layer answers) or a share from its spec,
//! - [`host`]: the running disks and shares, which the control plane adds, removes, resizes
//!   and measures,
//! - [`serve`]: the `vbmq serve` command,
//! - `test_utils` (tests, benchmarks and fuzz targets): over everything.

#![deny(missing_docs)]

pub mod backend;
pub mod config;
pub mod confine;
mod devices;
pub mod guest;
pub mod held_files;
pub mod host;
pub mod limits;
pub mod log_limit;
pub mod nbd;
pub mod own_files;
pub mod passed_fds;
pub mod serve;
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
