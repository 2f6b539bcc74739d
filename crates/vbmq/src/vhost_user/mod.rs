//! The vhost-user glue: the socket that accepts one frontend after another (any device's), a
//! connection's queues (any device's), and each device's `vhost-user-backend` trait
//! implementation.

mod connection;
mod disk_server;
mod queue_handle;
mod queue_set;
mod share_server;
mod socket;
mod vhost_user_blk;
mod vhost_user_fs;

pub use disk_server::DiskServer;
pub use share_server::ShareServer;
pub use socket::{SocketError, Stopper};
pub use vhost_user_blk::VhostUserBlk;
pub use vhost_user_fs::VhostUserFs;
