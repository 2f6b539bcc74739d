//! `vbmq ctl`'s side of NBD over TCP, only with TLS: `export-begin tcp:HOST:PORT --tls-creds
//! DIR` binds the TCP socket and opens the server's credentials, `mirror-begin
//! nbds://HOST:PORT/NAME` connects and opens the client's; both pass descriptors, so a
//! confined vbmq binds, connects and opens nothing. The files are QEMU's `tls-creds-x509`
//! layout, so one directory serves QEMU, `qemu-nbd`, `nbdinfo` and vbmq alike.

use std::fs::File;
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use vbmq::nbd::tls::creds::{CA_CERT, CLIENT_CERT, CLIENT_KEY, SERVER_CERT, SERVER_KEY};
use vbmq::nbd::uri::{AnyUri, TlsUri};

/// How long `mirror-begin` waits for the destination's TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// What `export-begin tcp:` passes: the listening socket, then the credentials.
pub struct TcpExport {
    /// The bound, listening socket.
    pub listener: TcpListener,
    /// `ca-cert.pem`, `server-cert.pem`, `server-key.pem`.
    pub creds: Vec<File>,
}

/// For `tcp:HOST:PORT`: binds it and opens the credentials in `creds`, which TCP requires;
/// `None` for another address (which takes no `--tls-creds`).
pub fn bind(address: &str, creds: Option<&Path>) -> Result<Option<TcpExport>, String> {
    let Some(host_port) = address.strip_prefix("tcp:") else {
        if creds.is_some() {
            return Err(format!(
                "{address}: --tls-creds is for tcp:HOST:PORT (a unix: export is reached through \
                 its 0600 socket, in the clear)"
            ));
        }
        return Ok(None);
    };
    let Some(dir) = creds else {
        return Err(format!(
            "{address}: NBD over TCP is served only with TLS: give --tls-creds DIR (ca-cert.pem, \
             server-cert.pem, server-key.pem: QEMU's tls-creds-x509 layout)"
        ));
    };
    let creds = [CA_CERT, SERVER_CERT, SERVER_KEY]
        .iter()
        .map(|name| open(dir, name))
        .collect::<Result<Vec<_>, _>>()?;
    let listener = TcpListener::bind(host_port).map_err(|e| format!("{address}: {e}"))?;
    // Accepted connections inherit it: replies are not held back for a full segment.
    no_delay(&listener);
    Ok(Some(TcpExport { listener, creds }))
}

/// For an `nbds://` URI: the connected socket, `ca-cert.pem`, and the client's certificate
/// and key if the directory has both; `None` for another URI.
pub fn connect(destination: &str, creds: Option<&Path>) -> Result<Option<Vec<OwnedFd>>, String> {
    let uri = match destination.parse::<AnyUri>() {
        Ok(AnyUri::Tls(uri)) => uri,
        _ if creds.is_some() => {
            return Err(format!(
                "{destination}: --tls-creds is for nbds://HOST:PORT/NAME"
            ));
        }
        _ => return Ok(None),
    };
    let dir = match (&uri.certificates, creds) {
        (Some(_), Some(_)) => {
            return Err("give either tls-certificates= in the URI or --tls-creds, not both".into());
        }
        (Some(dir), None) => dir.as_path(),
        (None, Some(dir)) => dir,
        (None, None) => {
            return Err(format!(
                "{destination}: give --tls-creds DIR or tls-certificates=DIR (DIR/ca-cert.pem \
                 verifies the server)"
            ));
        }
    };
    let mut fds = vec![OwnedFd::from(tcp(&uri)?), open(dir, CA_CERT)?.into()];
    if dir.join(CLIENT_CERT).exists() || dir.join(CLIENT_KEY).exists() {
        fds.push(open(dir, CLIENT_CERT)?.into());
        fds.push(open(dir, CLIENT_KEY)?.into());
    }
    Ok(Some(fds))
}

fn tcp(uri: &TlsUri) -> Result<TcpStream, String> {
    let at = format!("{}:{}", uri.host, uri.port);
    let addresses = (uri.host.as_str(), uri.port)
        .to_socket_addrs()
        .map_err(|e| format!("{at}: {e}"))?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => format!("{at}: {e}"),
        None => format!("{at}: no address"),
    })
}

/// A credential file, opened with the operator's rights; a regular file.
fn open(dir: &Path, name: &str) -> Result<File, String> {
    let path = dir.join(name);
    let file = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    match file.metadata() {
        Ok(m) if m.is_file() => Ok(file),
        Ok(_) => Err(format!("{}: not a regular file", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn no_delay(listener: &TcpListener) {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket descriptor, and a c_int option value of the size given.
    unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}
