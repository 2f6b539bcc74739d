//! What a migration's destination does with a file the guest held that it cannot open again
//! (virtiofsd's `--migration-on-error`).

/// The destination's answer to a held file it cannot open again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnError {
    /// Fail the migration (`CHECK_DEVICE_STATE` fails; the guest goes on on the source).
    #[default]
    Abort,
    /// Let the migration finish; the guest gets errors on that file (`EBADF`) from then on.
    GuestError,
}

impl OnError {
    /// The value of `migration-on-error=`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "abort" => Some(OnError::Abort),
            "guest-error" => Some(OnError::GuestError),
            _ => None,
        }
    }
}
