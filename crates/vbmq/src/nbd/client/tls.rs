//! The client's way into a server that requires TLS: a TCP connection, the hello and
//! `NBD_OPT_STARTTLS` in the clear, the TLS handshake (the server's certificate verified
//! against the CA, for the name the operator gave), then the session relayed to a Unix stream
//! on which the rest of the handshake and transmission run as on a Unix socket.

use std::io;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::ClientConnection;
use rustls_pki_types::ServerName;

use super::{ClientError, handshake};
use crate::nbd::tls::{Armed, relay};

/// Opens TCP connections to a server that requires TLS.
pub struct TlsDialer {
    /// Opens a new TCP connection to the server (for a passed socket: once).
    pub connect: Box<dyn Fn() -> io::Result<TcpStream> + Send + Sync>,
    /// The CA the server's certificate must chain to, and the client's certificate if any.
    pub config: Arc<rustls::ClientConfig>,
    /// The name (or address) the server's certificate must carry.
    pub server_name: ServerName<'static>,
}

impl TlsDialer {
    /// A connection past `STARTTLS` and the TLS handshake, both within `timeout`; reads and
    /// writes on the stream returned keep `timeout` until the caller clears it.
    pub(super) fn dial(&self, timeout: Duration) -> Result<UnixStream, ClientError> {
        let tcp = (self.connect)()?;
        let mut armed = Armed {
            tcp: &tcp,
            until: Instant::now() + timeout,
        };
        handshake::hello(&mut armed)?;
        handshake::starttls(&mut armed)?;
        let mut tls = ClientConnection::new(self.config.clone(), self.server_name.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        while tls.is_handshaking() {
            tls.complete_io(&mut armed)?;
        }
        armed.disarm()?;
        let stream = relay::start(tls.into(), tcp)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(stream)
    }
}
