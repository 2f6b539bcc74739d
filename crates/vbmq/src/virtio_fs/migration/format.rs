//! The share's state as it crosses from the source to the destination: a header (magic, version,
//! body length) and a JSON body. The bytes come from the frontend, so decoding trusts nothing:
//! the length must match what arrived, every count and path has a hard limit, and every path
//! must name something beneath the shared directory by plain names only.

use serde::{Deserialize, Serialize};

pub use crate::virtio_fs::session::Session;

/// The first bytes of every state.
pub const MAGIC: [u8; 8] = *b"vbmq-fs\n";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;
/// Magic, version and body length.
pub const HEADER_LEN: usize = 16;
/// The largest state accepted, header included.
pub const MAX_STATE: usize = 64 << 20;
/// The most inodes, and the most handles, one state may carry.
pub const MAX_ENTRIES: usize = 1 << 20;
/// The longest path (`PATH_MAX`, its NUL excluded) and name (`NAME_MAX`).
const MAX_PATH: usize = 4095;
const MAX_NAME: usize = 255;
/// The longest file handle (the kernel's `MAX_HANDLE_SZ`).
pub const MAX_HANDLE: usize = 128;
/// The root's inode number (FUSE's `FUSE_ROOT_ID`).
const ROOT_INODE: u64 = 1;

/// An inode the guest holds, by its path beneath the shared directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InodeState {
    /// The inode number the guest knows.
    pub inode: u64,
    /// The guest's lookup count.
    pub lookups: u64,
    /// The path relative to the shared directory, as bytes; empty when the inode is lost.
    pub path: Vec<u8>,
    /// Why the source found no path to the inode (deleted, moved out of the share): the
    /// destination refuses the migration, or lets the guest get errors on it (`OnError`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
    /// The file's identity on its file system, if it has one: the destination, when it sees
    /// the same file system, checks that the path still leads to this very file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<FileIdentity>,
}

/// A file's identity across processes and hosts that see one file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileIdentity {
    /// The file system's id (`statvfs`'s `f_fsid`), never 0.
    pub fsid: u64,
    /// The handle's type (`name_to_handle_at`).
    pub handle_type: i32,
    /// The handle's bytes, at most [`MAX_HANDLE`].
    pub handle: Vec<u8>,
}

/// A handle the guest holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleState {
    /// The handle number the guest knows.
    pub handle: u64,
    /// The inode it is open on.
    pub inode: u64,
    /// Its open flags.
    pub flags: u32,
}

/// Everything a share's guest holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareState {
    /// `None` before the guest's INIT.
    pub session: Option<Session>,
    /// The inodes, the root excepted.
    pub inodes: Vec<InodeState>,
    /// The open handles.
    pub handles: Vec<HandleState>,
}

/// Why a state is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Fewer bytes than the header says.
    #[error("the state is truncated: {0} bytes")]
    Truncated(usize),
    /// More than [`MAX_STATE`] bytes, or more bytes than the header says.
    #[error("the state is too large or has trailing bytes")]
    Oversized,
    /// Not a vbmq share state.
    #[error("not a vbmq share state")]
    Magic,
    /// A version this build does not read.
    #[error("state version {0} (this build reads {VERSION})")]
    Version(u32),
    /// The body does not decode.
    #[error("the state's body does not decode: {0}")]
    Body(String),
    /// More than [`MAX_ENTRIES`] inodes or handles.
    #[error("the state holds too many inodes or handles")]
    TooMany,
    /// An inode or handle number that is reserved or given twice.
    #[error("inode or handle {0} is reserved, repeated, or unknown")]
    Number(u64),
    /// A path that is not plain names beneath the shared directory.
    #[error("path {0:?} does not name a file beneath the shared directory")]
    Path(String),
}

impl ShareState {
    /// The bytes of this state.
    pub fn encode(&self) -> Result<Vec<u8>, StateError> {
        let body = serde_json::to_vec(self).map_err(|e| StateError::Body(e.to_string()))?;
        let len = u32::try_from(body.len()).map_err(|_| StateError::Oversized)?;
        if body.len() > MAX_STATE - HEADER_LEN {
            return Err(StateError::Oversized);
        }
        let mut out = Vec::with_capacity(HEADER_LEN + body.len());
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// The state in `bytes`, checked (see [`Self::check`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        if bytes.len() > MAX_STATE {
            return Err(StateError::Oversized);
        }
        let (Some(magic), Some(version), Some(len)) =
            (bytes.get(..8), bytes.get(8..12), bytes.get(12..16))
        else {
            return Err(StateError::Truncated(bytes.len()));
        };
        if magic != MAGIC {
            return Err(StateError::Magic);
        }
        let version = u32::from_le_bytes(version.try_into().unwrap_or_default());
        if version != VERSION {
            return Err(StateError::Version(version));
        }
        let len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
        let body = &bytes[HEADER_LEN..];
        if body.len() < len {
            return Err(StateError::Truncated(bytes.len()));
        }
        if body.len() > len {
            return Err(StateError::Oversized);
        }
        let state: ShareState =
            serde_json::from_slice(body).map_err(|e| StateError::Body(e.to_string()))?;
        state.check()?;
        Ok(state)
    }

    /// Refuses a state a well-behaved source cannot have written: too many entries, the root's
    /// number or a number given twice, a handle on an inode the state does not hold, a lookup
    /// count of 0, a path that is not plain names.
    pub fn check(&self) -> Result<(), StateError> {
        if self.inodes.len() > MAX_ENTRIES || self.handles.len() > MAX_ENTRIES {
            return Err(StateError::TooMany);
        }
        let mut inodes = std::collections::BTreeSet::new();
        for inode in &self.inodes {
            if inode.inode <= ROOT_INODE || inode.lookups == 0 || !inodes.insert(inode.inode) {
                return Err(StateError::Number(inode.inode));
            }
            match &inode.lost {
                None => check_path(&inode.path)?,
                Some(reason) if inode.path.is_empty() && reason.len() <= MAX_PATH => {}
                Some(_) => return Err(StateError::Number(inode.inode)),
            }
            if inode.identity.as_ref().is_some_and(|id| {
                id.fsid == 0 || id.handle.is_empty() || id.handle.len() > MAX_HANDLE
            }) {
                return Err(StateError::Number(inode.inode));
            }
        }
        let mut handles = std::collections::BTreeSet::new();
        for handle in &self.handles {
            let known = handle.inode == ROOT_INODE || inodes.contains(&handle.inode);
            if !known || !handles.insert(handle.handle) {
                return Err(StateError::Number(handle.handle));
            }
        }
        Ok(())
    }
}

/// Refuses a path that is empty, absolute, too long, or has an empty, `.` or `..` component or
/// a NUL byte: only plain names, which the destination resolves beneath the shared directory
/// without following symbolic links.
pub fn check_path(path: &[u8]) -> Result<(), StateError> {
    let refuse = || StateError::Path(String::from_utf8_lossy(path).into_owned());
    if path.is_empty() || path.len() > MAX_PATH || path.contains(&0) {
        return Err(refuse());
    }
    for name in path.split(|&b| b == b'/') {
        if name.is_empty() || name == b"." || name == b".." || name.len() > MAX_NAME {
            return Err(refuse());
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "format_tests.rs"]
mod tests;
