//! Log lines to syslog (virtiofsd's `--syslog`), each at its event's level, through `/dev/log`
//! connected before the process is confined: a line is one `write(2)` on that socket (the
//! seccomp filter allows no new socket later, so a syslog daemon that restarts loses vbmq's
//! lines until vbmq restarts).

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

/// syslog's `LOG_USER` facility.
const FACILITY: libc::c_int = libc::LOG_USER;

/// Writes each log line to syslog as `vbmq[PID]`.
#[derive(Clone)]
pub struct Syslog(Arc<File>);

impl Syslog {
    /// Connects to syslog's socket, `/dev/log`.
    pub fn open() -> std::io::Result<Self> {
        let socket = UnixDatagram::unbound()?;
        socket.connect("/dev/log")?;
        Ok(Syslog(Arc::new(File::from(OwnedFd::from(socket)))))
    }
}

/// One line being formatted, sent at its priority when dropped.
pub struct Line {
    socket: Arc<File>,
    priority: libc::c_int,
    text: Vec<u8>,
}

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.text);
        let message = format!(
            "<{}>vbmq[{}]: {}",
            FACILITY | self.priority,
            std::process::id(),
            text.trim()
        );
        // A lost line is all a failure costs.
        let _ = (&*self.socket).write(message.as_bytes());
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
            socket: self.0.clone(),
            priority: libc::LOG_INFO,
            text: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Line {
        let priority = match *meta.level() {
            Level::ERROR => libc::LOG_ERR,
            Level::WARN => libc::LOG_WARNING,
            Level::INFO => libc::LOG_INFO,
            Level::DEBUG | Level::TRACE => libc::LOG_DEBUG,
        };
        Line {
            socket: self.0.clone(),
            priority,
            text: Vec::new(),
        }
    }
}
