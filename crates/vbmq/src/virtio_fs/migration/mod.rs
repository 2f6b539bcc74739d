//! Live migration of a share (`VHOST_USER_PROTOCOL_F_DEVICE_STATE`): on the source, the FUSE
//! session and the passthrough's inode and handle tables become a [`ShareState`] (each inode by
//! its path, virtiofsd's `find-paths` mode); on the destination, sharing the same directory,
//! each path is opened again beneath it and the tables are rebuilt under the same numbers, so
//! the guest's inodes and open files go on working. Data is never moved: both sides must see
//! the same files.

mod format;
mod paths;
mod transfer;

use std::collections::BTreeSet;
use std::io;

use fuse_backend_rs::abi::fuse_abi::FsOptions;
use fuse_backend_rs::api::filesystem::FileSystem;

pub use format::{FileIdentity, HandleState, InodeState, Session, ShareState, StateError};
pub use transfer::{Direction, StateTransfer};

use super::{FsDevice, OnError};

/// The oldest FUSE minor version a loaded session may have: older guests get replies the
/// server shapes by the version their INIT gave, which a load cannot set.
const MIN_MINOR: u32 = 4;

impl FsDevice {
    /// The share's state, to send to the destination. An inode with no path leading to it in
    /// the share any more (deleted, or moved out) is sent as lost, for the destination to
    /// decide (`OnError`), with a reason that names no host path.
    pub fn save_state(&self) -> io::Result<ShareState> {
        let root = &self.root;
        // Where the share's directory is now, to read each held inode's path relative to it.
        let root_path = super::fds::fd_path(root)?;
        let mut inodes = Vec::new();
        for export in self.fs.export_inodes()? {
            let (path, lost) = match paths::path_in_share(&root_path, root, &export.file) {
                Ok(path) => (path, None),
                Err(e) => {
                    crate::limited!(warn, "share: inode {} cannot migrate: {e}", export.inode);
                    (Vec::new(), Some(e.to_string()))
                }
            };
            inodes.push(InodeState {
                inode: export.inode,
                lookups: export.refcount,
                identity: lost
                    .is_none()
                    .then(|| paths::identity(&export.file))
                    .flatten(),
                path,
                lost,
            });
        }
        let handles = self
            .fs
            .export_handles()
            .into_iter()
            .map(|h| HandleState {
                handle: h.handle,
                inode: h.inode,
                flags: h.flags,
            })
            .collect();
        Ok(ShareState {
            session: self.session(),
            inodes,
            handles,
        })
    }

    /// Replaces whatever the share's guest held by `state` (checked by [`ShareState::check`]).
    /// On error nothing is held and the session has not begun.
    pub fn load_state(&self, state: &ShareState) -> io::Result<()> {
        let invalid = |e: StateError| io::Error::new(io::ErrorKind::InvalidData, e);
        state.check().map_err(invalid)?;
        self.end_session();
        let loaded = self.load_tables(state);
        if loaded.is_err() {
            self.end_session();
        }
        loaded
    }

    fn load_tables(&self, state: &ShareState) -> io::Result<()> {
        let Some(session) = state.session else {
            // No INIT yet: nothing can be held either.
            if state.inodes.is_empty() && state.handles.is_empty() {
                return Ok(());
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "inodes held before the FUSE session began",
            ));
        };
        if session.minor < MIN_MINOR {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "FUSE {}.{} is too old to migrate",
                    session.major, session.minor
                ),
            ));
        }
        // The options the guest's INIT set, set again the same way.
        self.fs.init(FsOptions::from_bits_truncate(session.flags))?;
        let root = &self.root;
        let mut missing = BTreeSet::new();
        for inode in &state.inodes {
            let imported = match &inode.lost {
                Some(reason) => Err(io::Error::other(format!("lost on the source: {reason}"))),
                None => paths::open_beneath(root, &inode.path).and_then(|file| {
                    paths::check_identity(&file, inode.identity.as_ref())?;
                    self.fs.import_inode(inode.inode, inode.lookups, file)
                }),
            };
            if let Err(e) = imported {
                let e = io::Error::other(format!(
                    "inode {} ({}): {e}",
                    inode.inode,
                    String::from_utf8_lossy(&inode.path)
                ));
                self.on_error(e)?;
                missing.insert(inode.inode);
            }
        }
        for handle in &state.handles {
            // A read-only share's guest never held a handle open for writing.
            if self.readonly() && super::readonly::opens_for_writing(handle.flags) {
                return Err(io::Error::from_raw_os_error(libc::EROFS));
            }
            if missing.contains(&handle.inode) {
                continue;
            }
            if let Err(e) = self
                .fs
                .import_handle(handle.handle, handle.inode, handle.flags)
            {
                self.on_error(io::Error::other(format!("handle {}: {e}", handle.handle)))?;
            }
        }
        self.resume_session(session);
        Ok(())
    }

    /// `e` for a held file that could not be opened again: the load's end, or with
    /// `OnError::GuestError` a warning (the guest gets `EBADF` on that file).
    fn on_error(&self, e: io::Error) -> io::Result<()> {
        match self.migration_on_error {
            OnError::Abort => Err(e),
            OnError::GuestError => {
                crate::limited!(warn, "share: {e}; the guest gets errors on it");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
#[path = "device_state_tests.rs"]
mod tests;
