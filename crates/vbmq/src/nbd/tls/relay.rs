//! A TLS session relayed to a Unix stream: a thread of its own encrypts what the NBD code
//! writes on its end of a socket pair and decrypts what the peer sends into it. The NBD server
//! and client so see the same stream they see on a Unix socket, whatever they do with it
//! (clones for a reader and a writer, shutdown), and TLS stays in this one place.
//!
//! Memory is bounded: at most one read of either side is held at a time (rustls holds at most
//! 16 KiB of received plaintext, and no plaintext is taken from the NBD side until every
//! record before it is written). The peer's end is passed on as a half-close, so what it sent
//! before is delivered; the NBD side's end (it closes, never half-closes) ends the relay once
//! its last bytes and TLS's close_notify are written, whatever the peer does; an error on
//! either side ends both.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The largest piece moved at once.
const CHUNK: usize = 64 << 10;

/// Starts relaying `tls`, whose handshake is complete on `tcp`; the NBD code's end.
pub fn start(tls: rustls::Connection, tcp: TcpStream) -> io::Result<UnixStream> {
    let (ours, theirs) = UnixStream::pair()?;
    tcp.set_nonblocking(true)?;
    ours.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("vbmq-nbd-tls".into())
        .spawn(move || {
            let mut relay = Relay {
                tls,
                tcp,
                plain: ours,
                decrypted: Vec::new(),
                sent: 0,
                peer_ended: false,
                plain_ended: false,
                buf: vec![0; CHUNK],
            };
            if let Err(e) = relay.run() {
                crate::limited!(debug, "NBD TLS connection ended: {e}");
            }
        })?;
    Ok(theirs)
}

struct Relay {
    tls: rustls::Connection,
    tcp: TcpStream,
    /// The NBD code's stream.
    plain: UnixStream,
    /// Decrypted bytes not yet written to `plain`, from `sent` on.
    decrypted: Vec<u8>,
    sent: usize,
    /// The peer closed (TLS close_notify, or the TCP connection's end).
    peer_ended: bool,
    /// The NBD side closed its writing half (or the whole stream).
    plain_ended: bool,
    buf: Vec<u8>,
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted
}

impl Relay {
    fn run(&mut self) -> io::Result<()> {
        let mut passed_on_end = false;
        loop {
            self.take_decrypted()?;
            self.write_plain()?;
            if self.peer_ended && self.sent == self.decrypted.len() && !passed_on_end {
                let _ = self.plain.shutdown(Shutdown::Write);
                passed_on_end = true;
            }
            self.write_tls()?;
            let plain_idle = self.sent == self.decrypted.len();
            let want_tcp_in = !self.peer_ended && plain_idle && self.tls.wants_read();
            let want_tcp_out = self.tls.wants_write();
            let want_plain_in = !self.plain_ended && !self.tls.wants_write();
            let want_plain_out = !plain_idle;
            if self.plain_ended && !want_tcp_out {
                return Ok(());
            }
            if !(want_tcp_in || want_tcp_out || want_plain_in || want_plain_out) {
                return Ok(());
            }
            let (tcp_ready, plain_ready) = self.wait(
                events(want_tcp_in, want_tcp_out),
                events(want_plain_in, want_plain_out),
            )?;
            if tcp_ready & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && want_tcp_in {
                self.read_tls()?;
            }
            if plain_ready & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && want_plain_in {
                self.read_plain()?;
            }
        }
    }

    /// Moves what rustls decrypted into `decrypted`, once the last of it is written.
    fn take_decrypted(&mut self) -> io::Result<()> {
        if self.sent < self.decrypted.len() {
            return Ok(());
        }
        self.decrypted.clear();
        self.sent = 0;
        while self.decrypted.len() < CHUNK {
            match self.tls.reader().read(&mut self.buf) {
                Ok(0) => {
                    self.peer_ended = true;
                    break;
                }
                Ok(n) => self.decrypted.extend_from_slice(&self.buf[..n]),
                Err(e) if would_block(&e) => break,
                // The peer closed without close_notify: what came before is still delivered.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.peer_ended = true;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_plain(&mut self) -> io::Result<()> {
        while self.sent < self.decrypted.len() {
            match self.plain.write(&self.decrypted[self.sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn write_tls(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(_) => {}
                Err(e) if would_block(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read_tls(&mut self) -> io::Result<()> {
        match self.tls.read_tls(&mut self.tcp) {
            Ok(0) => self.peer_ended = true,
            Ok(_) => {}
            Err(e) if would_block(&e) => return Ok(()),
            Err(e) => return Err(e),
        }
        if let Err(e) = self.tls.process_new_packets() {
            // The alert rustls queued tells the peer why, if it can be written.
            let _ = self.tls.write_tls(&mut self.tcp);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(())
    }

    fn read_plain(&mut self) -> io::Result<()> {
        match self.plain.read(&mut self.buf) {
            Ok(0) => {
                self.plain_ended = true;
                self.tls.send_close_notify();
                Ok(())
            }
            Ok(n) => self.tls.writer().write_all(&self.buf[..n]),
            Err(e) if would_block(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits for either side; a side with no `events` is left out (so that a hung-up socket
    /// the relay does not read yet cannot spin it). Returns each side's `revents`.
    fn wait(&self, tcp: i16, plain: i16) -> io::Result<(i16, i16)> {
        let fd = |raw: i32, events: i16| libc::pollfd {
            fd: if events == 0 { -1 } else { raw },
            events,
            revents: 0,
        };
        let mut fds = [
            fd(self.tcp.as_raw_fd(), tcp),
            fd(self.plain.as_raw_fd(), plain),
        ];
        loop {
            // SAFETY: `fds` is an array of two initialised pollfds that outlives the call.
            let ret = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if ret >= 0 {
                return Ok((fds[0].revents, fds[1].revents));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

fn events(read: bool, write: bool) -> i16 {
    (if read { libc::POLLIN } else { 0 }) | (if write { libc::POLLOUT } else { 0 })
}
