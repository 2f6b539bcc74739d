//! systemd's readiness protocol (`Type=notify`): `READY=1` on the datagram socket
//! `NOTIFY_SOCKET` names, once every disk's socket listens. A dozen lines, so no crate.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Tells the service manager the daemon is ready, if it asked (`NOTIFY_SOCKET` is set); sent
/// before confinement, which would refuse a new socket.
pub fn notify_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    // `@name` is a socket in the abstract namespace.
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(&path),
    };
    let sent = addr.and_then(|addr| {
        let socket = UnixDatagram::unbound()?;
        socket.send_to_addr(b"READY=1\n", &addr)
    });
    if let Err(e) = sent {
        tracing::warn!("cannot tell systemd the disks are ready: {e}");
    }
}
