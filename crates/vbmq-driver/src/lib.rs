//! The guest's side of virtio, in user space, for vbmq's benchmark and tests: guest memory a
//! vhost-user backend can map, a split virtqueue driver, and a virtio-fs client that speaks
//! FUSE over vhost-user as the guest's `virtiofs` driver does (libblkio plays this part for
//! block devices; nothing does for virtio-fs).

#![deny(missing_docs)]

mod blk;
pub mod fs_client;
pub mod fuse;
mod guest_ram;
mod split_ring;

pub use blk::blk_header;
pub use fs_client::FsClient;
pub use guest_ram::GuestRam;
pub use split_ring::{Buffer, SplitRing};
