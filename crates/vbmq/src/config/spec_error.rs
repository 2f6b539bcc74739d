//! Why a `--disk` or `--fs` argument cannot be served.

/// A `--disk` argument that cannot be served; the message names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--disk {key}: {reason}")]
pub struct SpecError {
    /// The `--disk` key at fault.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The error of `key`, for `reason`.
pub(super) fn bad(key: &str, reason: impl Into<String>) -> SpecError {
    SpecError {
        key: key.to_string(),
        reason: reason.into(),
    }
}
