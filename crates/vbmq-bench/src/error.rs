//! Errors of the benchmark harness.

use std::io;

/// Why a benchmark step failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A bad command line; the message names the argument.
    #[error("{0}")]
    Usage(String),
    /// A system call or file operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// libblkio refused or failed an operation.
    #[error("{context}: {message}")]
    Blkio {
        /// What was being done.
        context: String,
        /// libblkio's own message.
        message: String,
    },
    /// A backend under test did not come up or died.
    #[error("{0}")]
    Backend(String),
    /// A request completed with an error or did not complete in time.
    #[error("{0}")]
    Request(String),
    /// The user pressed Ctrl-C.
    #[error("interrupted")]
    Interrupted,
}

impl BenchError {
    /// Wraps an `io::Error` with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }

    /// Wraps a libblkio error with what was being done.
    pub fn blkio(context: impl Into<String>, err: blkio::Error) -> Self {
        BenchError::Blkio {
            context: context.into(),
            message: err.message().to_string(),
        }
    }
}

/// The harness' result type.
pub type Result<T> = std::result::Result<T, BenchError>;
