//! The server's side of a TCP connection up to TLS: the hello, the options a client may send
//! in the clear (`STARTTLS`, `ABORT`; every other one refused with `NBD_REP_ERR_TLS_REQD`,
//! `EXPORT_NAME` by closing, as the protocol has no error for it), then the TLS handshake. The
//! rest of the negotiation is the plain server's, inside the session.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use rustls::{ServerConfig, ServerConnection};

use super::{Armed, relay};
use crate::nbd::wire::{self, OptionHeader, handshake, opt, rep};

/// Options a client may send before `STARTTLS`.
const MAX_CLEAR_OPTIONS: u32 = 16;
/// The largest option data read (and dropped) before TLS; a longer option ends the connection.
const MAX_CLEAR_OPTION: u32 = 4096;

/// How a connection's clear part ended.
pub enum Accepted {
    /// TLS is on: the session's plaintext stream and the client's handshake flags.
    Tls(UnixStream, u32),
    /// The client left, or broke the protocol: why, for the log.
    Ended(&'static str),
}

/// Runs the clear part and the TLS handshake of `tcp` with `config`, all before `until`.
pub fn accept(tcp: TcpStream, config: &Arc<ServerConfig>, until: Instant) -> io::Result<Accepted> {
    let mut armed = Armed { tcp: &tcp, until };
    let flags = match clear_options(&mut armed)? {
        Ok(flags) => flags,
        Err(why) => return Ok(Accepted::Ended(why)),
    };
    let mut tls = ServerConnection::new(config.clone())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    while tls.is_handshaking() {
        tls.complete_io(&mut armed)?;
    }
    armed.disarm()?;
    Ok(Accepted::Tls(relay::start(tls.into(), tcp)?, flags))
}

/// The hello and the options before `STARTTLS`: the client's flags once it asked for TLS.
fn clear_options<S: Read + Write>(stream: &mut S) -> io::Result<Result<u32, &'static str>> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&wire::NBD_MAGIC.to_be_bytes());
    hello.extend_from_slice(&wire::IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES).to_be_bytes());
    stream.write_all(&hello)?;
    let mut flags = [0; 4];
    stream.read_exact(&mut flags)?;
    let flags = u32::from_be_bytes(flags);
    let known = u32::from(handshake::FIXED_NEWSTYLE | handshake::NO_ZEROES);
    if flags & !known != 0 {
        return Ok(Err("unknown client flags"));
    }
    if flags & u32::from(handshake::FIXED_NEWSTYLE) == 0 {
        return Ok(Err("not fixed newstyle"));
    }
    for _ in 0..MAX_CLEAR_OPTIONS {
        let mut header = [0; OptionHeader::SIZE];
        stream.read_exact(&mut header)?;
        let header = OptionHeader::decode(&header);
        if header.magic != wire::IHAVEOPT {
            return Ok(Err("bad option magic"));
        }
        if header.length > MAX_CLEAR_OPTION {
            return Ok(Err("option data too long before TLS"));
        }
        let mut data = vec![0; header.length as usize];
        stream.read_exact(&mut data)?;
        let (kind, message) = match header.option {
            opt::STARTTLS if data.is_empty() => {
                reply(stream, header.option, rep::ACK, b"")?;
                return Ok(Ok(flags));
            }
            opt::STARTTLS => (rep::ERR_INVALID, "STARTTLS takes no data"),
            opt::ABORT => {
                reply(stream, header.option, rep::ACK, b"")?;
                return Ok(Err("the client aborted before TLS"));
            }
            opt::EXPORT_NAME => return Ok(Err("EXPORT_NAME before TLS")),
            _ => (
                rep::ERR_TLS_REQD,
                "this server requires TLS: send NBD_OPT_STARTTLS first",
            ),
        };
        reply(stream, header.option, kind, message.as_bytes())?;
    }
    Ok(Err("too many options before TLS"))
}

fn reply<S: Write>(stream: &mut S, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    // Short constant messages: the length fits.
    let length = u32::try_from(data.len()).unwrap_or(0);
    let mut out = wire::option_reply(option, kind, length).to_vec();
    out.extend_from_slice(&data[..length as usize]);
    stream.write_all(&out)
}
