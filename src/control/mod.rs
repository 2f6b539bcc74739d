//! The control socket of `vbmq serve --control PATH`: one JSON request per line, one JSON reply
//! per line (docs/control.md). Each client has its own thread, a deadline and a size limit, so
//! a slow or hostile client stalls neither other clients nor any disk's I/O.

mod answer;
pub mod passed_fds;
mod passed_tls;
pub mod protocol;
mod server;

pub use protocol::{Request, VERSION};
pub use server::{Server, socket_dir};
