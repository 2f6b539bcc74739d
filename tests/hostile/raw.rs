//! vhost-user messages written by hand, for what vhost's `Frontend` refuses to send: lying
//! sizes, wrong fd counts, truncated headers, unknown requests.

use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// Header flags: protocol version 1, and "reply wanted".
pub const VERSION: u32 = 0x1;
pub const NEED_REPLY: u32 = 0x8;

/// What the backend did with a message.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// A reply; for REPLY_ACK, the u64 is 0 on success.
    Reply { request: u32, payload: Vec<u8> },
    /// The backend closed the connection.
    Closed,
    /// Nothing within the timeout (the backend may be waiting for bytes we never send).
    Silent,
}

impl Answer {
    /// An error acknowledgement or a closed connection.
    pub fn is_refusal(&self) -> bool {
        match self {
            Answer::Closed => true,
            Answer::Reply { payload, .. } => payload.len() == 8 && payload != &[0; 8],
            Answer::Silent => false,
        }
    }
}

pub struct Raw {
    pub stream: UnixStream,
}

pub fn header(request: u32, flags: u32, size: u32) -> Vec<u8> {
    [request, flags, size]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

impl Raw {
    pub fn connect(socket: &Path) -> Self {
        let stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        Raw { stream }
    }

    /// Sends bytes (and fds) as one message; a send error means the backend hung up.
    pub fn send(&self, bytes: &[u8], fds: &[RawFd]) -> bool {
        if fds.is_empty() {
            (&self.stream).write_all(bytes).is_ok()
        } else {
            self.stream.send_with_fds(&[bytes], fds).is_ok()
        }
    }

    /// A full message: header (with `size` as given, true or not) and payload.
    pub fn message(
        &self,
        request: u32,
        flags: u32,
        size: u32,
        payload: &[u8],
        fds: &[RawFd],
    ) -> bool {
        let mut bytes = header(request, flags, size);
        bytes.extend_from_slice(payload);
        self.send(&bytes, fds)
    }

    pub fn answer(&self) -> Answer {
        let mut hdr = [0u8; 12];
        match (&self.stream).read_exact(&mut hdr) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Answer::Silent;
            }
            Err(_) => return Answer::Closed,
        }
        let word = |i: usize| u32::from_le_bytes(hdr[i * 4..i * 4 + 4].try_into().unwrap());
        let mut payload = vec![0u8; word(2).min(4096) as usize];
        if (&self.stream).read_exact(&mut payload).is_err() {
            return Answer::Closed;
        }
        Answer::Reply {
            request: word(0),
            payload,
        }
    }

    /// The minimal handshake a backend needs before memory and vring messages: owner, features
    /// (with VHOST_USER_F_PROTOCOL_FEATURES) and REPLY_ACK.
    pub fn handshake(&self, features: u64) {
        self.message(3, VERSION, 0, &[], &[]);
        self.message(1, VERSION, 0, &[], &[]);
        let offered = match self.answer() {
            Answer::Reply { payload, .. } => u64::from_le_bytes(payload[..8].try_into().unwrap()),
            other => panic!("GET_FEATURES: {other:?}"),
        };
        self.message(15, VERSION, 0, &[], &[]);
        let _ = self.answer();
        // REPLY_ACK | CONFIG | MQ
        self.message(16, VERSION, 8, &(0x8u64 | 0x200 | 0x1).to_le_bytes(), &[]);
        self.message(2, VERSION, 8, &(offered & features).to_le_bytes(), &[]);
    }
}
