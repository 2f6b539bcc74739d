//! NBD over TCP, only with TLS (the protocol's "TLS mandatory" mode): a client must send
//! `NBD_OPT_STARTTLS` first, every other option before it is refused with
//! `NBD_REP_ERR_TLS_REQD`, and nothing of an export is said in the clear.
//!
//! - [`creds`]: certificates in QEMU's `tls-creds-x509` layout, from passed descriptors;
//! - [`accept`]: the server's side up to the end of the TLS handshake;
//! - [`relay`]: the session relayed to a Unix stream, which the NBD server and client use as
//!   they use a Unix socket.
//!
//! TLS is rustls with ring's primitives: pure Rust but for ring's audited assembly, no
//! OpenSSL, and no process-wide provider to install.

pub mod accept;
pub mod creds;
pub mod relay;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

pub use accept::accept;
pub use creds::{ClientFiles, ServerFiles, client_config, server_config};
pub use rustls_pki_types::ServerName;

/// A TCP stream whose reads and writes fail once `until` has passed: each one is given the
/// time left (`SO_RCVTIMEO`, `SO_SNDTIMEO`), so a peer trickling bytes cannot stretch the
/// handshake past its deadline.
pub struct Armed<'a> {
    /// The connection.
    pub tcp: &'a TcpStream,
    /// The handshake's deadline.
    pub until: Instant,
}

impl Armed<'_> {
    fn arm(&self) -> io::Result<()> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        self.tcp.set_read_timeout(Some(left))?;
        self.tcp.set_write_timeout(Some(left))
    }

    /// The stream without deadline again, for transmission.
    pub fn disarm(self) -> io::Result<()> {
        self.tcp.set_read_timeout(None)?;
        self.tcp.set_write_timeout(None)
    }
}

impl Read for Armed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        let mut tcp = self.tcp;
        tcp.read(buf)
    }
}

impl Write for Armed<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm()?;
        let mut tcp = self.tcp;
        tcp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_trickling_peer_fails_the_handshake_at_its_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (tcp, _) = listener.accept().unwrap();
        let start = Instant::now();
        let mut armed = Armed {
            tcp: &tcp,
            until: start + Duration::from_millis(300),
        };
        let mut byte = [0; 1];
        let mut received = 0;
        let error = loop {
            // A byte every 50 ms: each read is served, none stretches the deadline.
            let _ = peer.write_all(&[1]);
            match armed.read(&mut byte) {
                Ok(n) => received += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => break e,
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the peer stretched the deadline"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(received > 0);
        assert!(start.elapsed() >= Duration::from_millis(300));
    }
}
