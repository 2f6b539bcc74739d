//! The vhost-user glue: the `vhost-user-backend` trait implementation and the socket that
//! accepts one frontend after another.

mod connection;
mod queue_handle;
mod share_server;
mod socket;
mod vhost_user_blk;
mod vhost_user_fs;

pub use share_server::ShareServer;
pub use socket::{DiskServer, SocketError, Stopper};
pub use vhost_user_blk::VhostUserBlk;
pub use vhost_user_fs::VhostUserFs;
