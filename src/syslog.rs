//! Log lines to syslog (virtiofsd's `--syslog`), each at its event's level.

use std::ffi::CString;
use std::io::Write;

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

/// Writes each log line to syslog (facility `LOG_USER`, identity `vbmq`).
#[derive(Clone, Copy)]
pub struct Syslog;

impl Syslog {
    /// Opens the connection to syslog now, before the process is confined.
    pub fn open() -> Self {
        // SAFETY: openlog keeps the identity pointer: a static C string.
        unsafe {
            libc::openlog(
                c"vbmq".as_ptr(),
                libc::LOG_PID | libc::LOG_NDELAY,
                libc::LOG_USER,
            )
        };
        Syslog
    }
}

/// One line being formatted, sent at its priority when dropped.
pub struct Line {
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
        let text: Vec<u8> = self.text.iter().copied().filter(|&b| b != 0).collect();
        if let Ok(text) = CString::new(text) {
            // SAFETY: a "%s" format with one C string argument.
            unsafe { libc::syslog(self.priority, c"%s".as_ptr(), text.as_ptr()) };
        }
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = Line;

    fn make_writer(&'a self) -> Line {
        Line {
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
            priority,
            text: Vec::new(),
        }
    }
}
