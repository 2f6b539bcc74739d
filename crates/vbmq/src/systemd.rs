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

/// The inherited descriptor `socket-fd=` names, checked to be open: a number from 3, or a name
/// systemd's socket activation gave (`FileDescriptorName=`, listed in `LISTEN_FDNAMES` for the
/// descriptors from 3 on, when `LISTEN_PID` is this process).
pub fn inherited_fd(text: &str) -> std::io::Result<std::os::fd::RawFd> {
    use std::io::{Error, ErrorKind};
    let fd = match text.parse::<std::os::fd::RawFd>() {
        Ok(fd) => fd,
        Err(_) => {
            let ours = std::env::var("LISTEN_PID")
                .ok()
                .and_then(|pid| pid.parse::<u32>().ok())
                == Some(std::process::id());
            let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
            let count = std::env::var("LISTEN_FDS")
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            let index = names
                .split(':')
                .take(count)
                .position(|name| name == text)
                .filter(|_| ours)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::NotFound,
                        format!("no socket named {text:?} was passed (LISTEN_FDNAMES)"),
                    )
                })?;
            std::os::fd::RawFd::try_from(index + 3).map_err(|_| ErrorKind::InvalidInput)?
        }
    };
    // SAFETY: F_GETFD on a descriptor number only reads its flags.
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!("descriptor {fd} was not inherited open"),
        ));
    }
    Ok(fd)
}
