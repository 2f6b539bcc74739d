//! An NBD server (the NetworkBlockDevice project's protocol, fixed newstyle, structured
//! replies, `base:allocation` and `qemu:dirty-bitmap:NAME`), for read-only point-in-time
//! exports of running disks:
//!
//! - [`wire`]: the wire format, shared with clients;
//! - [`server`]: one connection's handshake against an [`Export`] (`export`: the trait), then its transmission,
//!   pipelined (`transmission`: requests run on workers of the connection, bounded by
//!   `in_flight`);
//! - [`meta_context`]: the metadata contexts, and the dirty bitmaps frozen at the instant
//!   ([`WithBitmaps`] adds them to an export);
//! - [`listener`]: an export's socket, a thread per client, bounded;
//! - [`client`]: a pipelined client of one export (a `base=nbd` disk's base, a mirror's
//!   destination);
//! - [`tls`]: NBD over TCP, only with TLS (`NBD_OPT_STARTTLS`, certificates in QEMU's layout);
//! - [`uri`]: NBD URIs (`nbd+unix:///NAME?socket=PATH`, `nbds://HOST:PORT/NAME`), how an
//!   operator names an export.
//!
//! No maintained crate has the protocol with structured replies and metadata contexts (the
//! `nbd` crate is a sketch with neither; `tokio-nbd` needs tokio), so it is here, small.

pub mod client;
mod export;
mod in_flight;
pub mod listener;
pub mod meta_context;
pub mod server;
pub mod tls;
mod transmission;
pub mod uri;
pub mod wire;
pub mod with_bitmaps;

pub use listener::{NbdListener, NbdServer};
pub use meta_context::DirtyBitmap;
pub use server::Export;
pub use with_bitmaps::WithBitmaps;
