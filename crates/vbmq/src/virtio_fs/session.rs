//! The FUSE session a guest's INIT began, as a migration carries it.

use serde::{Deserialize, Serialize};

/// The FUSE session: what the guest's INIT asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// The guest's FUSE major version.
    pub major: u32,
    /// The guest's FUSE minor version.
    pub minor: u32,
    /// The guest's capability flags (`flags | flags2 << 32`).
    pub flags: u64,
}
