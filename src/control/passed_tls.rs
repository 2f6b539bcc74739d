//! The descriptors of NBD over TCP with TLS, as `vbmq ctl` passes them: an export's listening
//! TCP socket and its `ca-cert.pem`, `server-cert.pem`, `server-key.pem`; a mirror's connected
//! TCP socket and its `ca-cert.pem` (then `client-cert.pem`, `client-key.pem`). The files are
//! read here, once: a confined vbmq opens none.

use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::Mutex;

use vbmq::nbd::NbdListener;
use vbmq::nbd::client::TlsDialer;
use vbmq::nbd::tls::{ClientFiles, ServerFiles, client_config, server_config};
use vbmq::nbd::uri::TlsUri;

/// An export's listener: a Unix socket for `unix:PATH` (and nothing more), a TCP socket and
/// its three credential files for `tcp:HOST:PORT`.
pub fn listener(
    address: &str,
    fd: OwnedFd,
    rest: impl Iterator<Item = OwnedFd>,
    verify_peer: bool,
) -> Result<NbdListener, String> {
    let rest: Vec<OwnedFd> = rest.collect();
    if !address.starts_with("tcp:") {
        if !rest.is_empty() || verify_peer {
            return Err(format!("{address}: TLS is only for tcp:HOST:PORT"));
        }
        let listener = vbmq::passed_fds::listening_unix_socket(fd)
            .map_err(|e| format!("the listening socket: {e}"))?;
        return Ok(listener.into());
    }
    let Ok([ca, cert, key]) = <[OwnedFd; 3]>::try_from(rest) else {
        return Err(format!(
            "{address}: NBD over TCP is only with TLS: send ca-cert.pem, server-cert.pem and \
             server-key.pem after the other descriptors (vbmq ctl export-begin --tls-creds DIR \
             does)"
        ));
    };
    let tcp =
        vbmq::passed_fds::tcp_socket(fd, true).map_err(|e| format!("the listening socket: {e}"))?;
    let config = server_config(&ServerFiles {
        ca: File::from(ca),
        cert: File::from(cert),
        key: File::from(key),
        verify_peer,
    })
    .map_err(|e| format!("{address}: {e}"))?;
    Ok(NbdListener::Tls(TcpListener::from(tcp), config))
}

/// A mirror's way to `uri`: the connected TCP socket passed (once: a lost destination is not
/// reconnected), verified against the CA passed after it.
pub fn dialer(uri: &TlsUri, fds: Vec<OwnedFd>) -> Result<TlsDialer, String> {
    let mut fds = fds.into_iter();
    let (Some(stream), Some(ca)) = (fds.next(), fds.next()) else {
        return Err(
            "send the destination's connected TCP socket and ca-cert.pem (then client-cert.pem \
             and client-key.pem, if any) with the request (vbmq ctl mirror-begin does)"
                .into(),
        );
    };
    let cert_and_key = match (fds.next(), fds.next(), fds.next()) {
        (None, None, None) => None,
        (Some(cert), Some(key), None) => Some((File::from(cert), File::from(key))),
        _ => return Err("a client certificate without its key, or too many descriptors".into()),
    };
    let tcp = vbmq::passed_fds::tcp_socket(stream, false)
        .map_err(|e| format!("the destination's socket: {e}"))?;
    let config = client_config(&ClientFiles {
        ca: File::from(ca),
        cert_and_key,
    })
    .map_err(|e| e.to_string())?;
    let server_name = vbmq::nbd::tls::ServerName::try_from(uri.server_name().to_owned())
        .map_err(|e| format!("{}: {e}", uri.server_name()))?;
    let once = Mutex::new(Some(TcpStream::from(tcp)));
    Ok(TlsDialer {
        connect: Box::new(move || {
            once.lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "the destination's socket was passed once: no reconnection",
                    )
                })
        }),
        config,
        server_name,
    })
}
