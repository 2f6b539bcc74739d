//! What `vbmq bench` was asked to do (the command line itself is declared by the `vbmq` binary).

use std::path::PathBuf;

/// The benchmark's options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// About a minute instead of a few minutes: shorter runs, fewer cases.
    pub quick: bool,
    /// Report directory; `None` picks `./vbmq-bench-<date>/`.
    pub out: Option<PathBuf>,
    /// Run only the cases and systems whose identifier contains this.
    pub only: Option<String>,
}
