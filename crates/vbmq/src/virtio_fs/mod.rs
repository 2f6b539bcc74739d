//! The virtio-fs device (virtio device id 26): FUSE requests from the guest's `virtiofs`
//! driver, served by `fuse-backend-rs`'s protocol server over a passthrough of one host
//! directory. Its queue handler ([`queue`]) calls [`FsDevice::handle`] with each descriptor chain.

mod config_space;
mod fds;
mod features;
mod id_map;
mod id_map_fs;
pub mod migration;
mod on_error;
pub mod queue;
mod readonly;
mod request_copy;
mod root_mount;
mod session;
mod share;
pub mod thread_umask;

pub use config_space::{TAG_LEN, config_space};
pub use fds::{dev_ino, open_dir_at};
pub use features::{FsCache, ShareFeatures, check_xattrmap};
pub use id_map::{IdMap, IdRule};
pub use on_error::OnError;
pub use request_copy::RequestCopy;
pub use root_mount::{RootWall, check_passed_mount, detached_mount, mount_readable};
pub use share::{FsDevice, ShareError};
