//! The vhost-user glue: the `vhost-user-backend` trait implementation and the socket that
//! accepts one frontend after another.

mod blk_backend;
mod memory_table;
mod socket;

pub use blk_backend::BlkBackend;
pub use socket::{DiskServer, SocketError};
