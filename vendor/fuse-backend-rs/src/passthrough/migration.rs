// SPDX-License-Identifier: Apache-2.0

//! The inode and handle tables, exported and imported for live migration: the source exports
//! what the client holds, the embedder moves it (by path, by file handle, as it chooses), and the
//! destination imports it under the same numbers, so the client's references stay valid.

use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use vm_memory::bitmap::BitmapSlice;

use super::inode_store::InodeId;
use super::statx::statx;
use super::{FileHandle, Handle, HandleData, Inode, InodeData, InodeHandle, PassthroughFs};
use crate::abi::fuse_abi as fuse;
use crate::api::VFS_MAX_INO;

/// An inode the client holds (the root excepted), as the source exports it.
#[derive(Debug)]
pub struct InodeExport {
    /// The inode number the client knows.
    pub inode: u64,
    /// The client's lookup count.
    pub refcount: u64,
    /// An `O_PATH` descriptor of the inode.
    pub file: File,
}

/// A handle the client holds, as the source exports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleExport {
    /// The handle number the client knows.
    pub handle: u64,
    /// The inode it was opened on.
    pub inode: u64,
    /// The flags of its last open or `fcntl`.
    pub flags: u32,
}

/// The flags an open may carry that must not act again when a handle is opened anew.
const ONCE_FLAGS: i32 = libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_NOCTTY;

impl<S: BitmapSlice + Send + Sync> PassthroughFs<S> {
    /// Every inode the client holds but the root, with a descriptor of each.
    pub fn export_inodes(&self) -> io::Result<Vec<InodeExport>> {
        let inodes: Vec<Arc<InodeData>> = {
            let map = self.inode_map.inodes.read().unwrap();
            map.values().cloned().collect()
        };
        let mut out = Vec::with_capacity(inodes.len());
        for data in inodes.into_iter().filter(|d| d.inode != fuse::ROOT_ID) {
            let file = match data.handle {
                InodeHandle::File(ref f) => f.try_clone()?,
                InodeHandle::Handle(ref h) => h.open(libc::O_PATH)?,
            };
            out.push(InodeExport {
                inode: data.inode,
                refcount: data.refcount.load(Ordering::Acquire),
                file,
            });
        }
        Ok(out)
    }

    /// Every handle the client holds.
    pub fn export_handles(&self) -> Vec<HandleExport> {
        let handles = self.handle_map.handles.read().unwrap();
        handles
            .iter()
            .map(|(&handle, data)| HandleExport {
                handle,
                inode: data.inode,
                flags: data.get_flags(),
            })
            .collect()
    }

    /// Adds inode `inode` with lookup count `refcount` over `file`, an `O_PATH` descriptor the
    /// embedder opened inside the root. Refused: the root's number or one already in use, a
    /// number beyond the file system's range, a file already held under another number, and
    /// any import with `use_host_ino` (numbers then come from the host).
    pub fn import_inode(&self, inode: u64, refcount: u64, file: File) -> io::Result<()> {
        if self.cfg.use_host_ino {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        if inode == fuse::ROOT_ID || inode == 0 || inode > VFS_MAX_INO || refcount == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let st = statx(&file, None)?;
        let id = InodeId::from_stat(&st);
        let file_handle = if self.cfg.inode_file_handles {
            FileHandle::from_fd(&file)?
        } else {
            None
        };
        let handle = match file_handle.clone() {
            Some(h) => InodeHandle::Handle(self.to_openable_handle(h)?),
            None => InodeHandle::File(file),
        };
        let mut inodes = self.inode_map.get_map_mut();
        if inodes.get(&inode).is_some()
            || super::InodeMap::get_alt_locked(&inodes, &id, file_handle.as_ref()).is_some()
        {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let data = InodeData::new(inode as Inode, handle, refcount, id, st.st.st_mode);
        inodes.insert(Arc::new(data));
        self.next_inode.fetch_max(inode + 1, Ordering::AcqRel);
        Ok(())
    }

    /// Opens handle `handle` anew on `inode` (imported before) with `flags`, less those that
    /// act once (`O_CREAT`, `O_EXCL`, `O_TRUNC`, `O_NOCTTY`). Refused: a number already in use.
    pub fn import_handle(&self, handle: u64, inode: u64, flags: u32) -> io::Result<()> {
        if self.handle_map.handles.read().unwrap().contains_key(&handle) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let open_flags = (flags as i32) & !ONCE_FLAGS;
        let file = self.open_inode(inode, open_flags)?;
        let mut handles = self.handle_map.handles.write().unwrap();
        if handles.contains_key(&handle) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        let data = HandleData::new(inode, file, flags & !(ONCE_FLAGS as u32));
        handles.insert(handle as Handle, Arc::new(data));
        self.next_handle.fetch_max(handle.saturating_add(1), Ordering::AcqRel);
        Ok(())
    }
}
