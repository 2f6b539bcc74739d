//! The virtio-fs device (virtio device id 26): FUSE requests from the guest's `virtiofs`
//! driver, served by `fuse-backend-rs`'s protocol server over a passthrough of one host
//! directory. Its queue handler ([`queue`]) calls [`FsDevice::handle`] with each descriptor chain.

mod config_space;
pub mod queue;
mod readonly;
mod request_copy;
mod share;
pub mod thread_umask;

pub use config_space::{TAG_LEN, config_space};
pub use request_copy::RequestCopy;
pub use share::{FsDevice, ShareError};
