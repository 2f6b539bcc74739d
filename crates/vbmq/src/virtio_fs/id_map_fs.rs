//! [`IdMapFs`]: a file system whose guest sees user and group IDs through an [`IdMap`] each.
//! The request's credentials are translated once per request ([`FileSystem::id_remap`], which
//! the server calls on the file system it serves), CHOWN's IDs in SETATTR guest to host, and the
//! owners in every reply that carries attributes host to guest. A request that makes a file, or
//! a CHOWN, naming the ID `-1` is refused with `EINVAL` whatever the maps: it names no one, and
//! the passthrough's `setresuid(-1, -1, -1)` would keep the process's own IDs (root's). Every
//! method of [`FileSystem`] is written out, none left to the trait's defaults (as in
//! `readonly.rs`).

use std::ffi::CStr;
use std::io;
use std::time::Duration;

use fuse_backend_rs::abi::fuse_abi::{CreateIn, stat64, statvfs64};
use fuse_backend_rs::abi::virtio_fs::RemovemappingOne;
use fuse_backend_rs::api::filesystem::{
    Context, DirEntry, Entry, FileLock, FileSystem, FsOptions, GetxattrReply, IoctlData,
    ListxattrReply, OpenOptions, SetattrValid, ZeroCopyReader, ZeroCopyWriter,
};
use fuse_backend_rs::transport::FsCacheReqHandler;

use super::id_map::IdMap;

/// `F`, with IDs translated.
pub struct IdMapFs<F> {
    /// The file system served.
    pub fs: F,
    /// User IDs.
    pub uids: IdMap,
    /// Group IDs.
    pub gids: IdMap,
}

/// The ID no one has (`(uid_t)-1`, `(gid_t)-1`): "unchanged" to chown(2) and setresuid(2).
const NO_ID: u32 = u32::MAX;

/// Refuses a request whose credentials are [`NO_ID`] (a guest kernel sends real IDs with every
/// request that makes a file; `FUSE_INVALID_UIDGID` only with an idmapped mount, not offered).
fn named_creds(ctx: &Context) -> io::Result<()> {
    if ctx.uid == NO_ID || ctx.gid == NO_ID {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(())
}

impl<F> IdMapFs<F> {
    fn guest_stat(&self, mut st: stat64) -> stat64 {
        st.st_uid = self.uids.to_guest(st.st_uid);
        st.st_gid = self.gids.to_guest(st.st_gid);
        st
    }

    fn guest_entry(&self, mut entry: Entry) -> Entry {
        entry.attr = self.guest_stat(entry.attr);
        entry
    }

    fn guest_attr(&self, reply: io::Result<(stat64, Duration)>) -> io::Result<(stat64, Duration)> {
        reply.map(|(st, timeout)| (self.guest_stat(st), timeout))
    }
}

impl<F: FileSystem> FileSystem for IdMapFs<F> {
    type Inode = F::Inode;
    type Handle = F::Handle;

    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        self.fs.init(capable)
    }

    fn destroy(&self) {
        self.fs.destroy();
    }

    fn lookup(&self, ctx: &Context, parent: Self::Inode, name: &CStr) -> io::Result<Entry> {
        self.fs
            .lookup(ctx, parent, name)
            .map(|e| self.guest_entry(e))
    }

    fn forget(&self, ctx: &Context, inode: Self::Inode, count: u64) {
        self.fs.forget(ctx, inode, count);
    }

    fn batch_forget(&self, ctx: &Context, requests: Vec<(Self::Inode, u64)>) {
        self.fs.batch_forget(ctx, requests);
    }

    fn getattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Option<Self::Handle>,
    ) -> io::Result<(stat64, Duration)> {
        self.guest_attr(self.fs.getattr(ctx, inode, handle))
    }

    fn setattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        mut attr: stat64,
        handle: Option<Self::Handle>,
        valid: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        if valid.contains(SetattrValid::UID) {
            attr.st_uid = self.uids.to_host(attr.st_uid);
        }
        if valid.contains(SetattrValid::GID) {
            attr.st_gid = self.gids.to_host(attr.st_gid);
        }
        let unnamed = |id| id == NO_ID;
        if (valid.contains(SetattrValid::UID) && unnamed(attr.st_uid))
            || (valid.contains(SetattrValid::GID) && unnamed(attr.st_gid))
        {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        self.guest_attr(self.fs.setattr(ctx, inode, attr, handle, valid))
    }

    fn readlink(&self, ctx: &Context, inode: Self::Inode) -> io::Result<Vec<u8>> {
        self.fs.readlink(ctx, inode)
    }

    fn symlink(
        &self,
        ctx: &Context,
        linkname: &CStr,
        parent: Self::Inode,
        name: &CStr,
    ) -> io::Result<Entry> {
        named_creds(ctx)?;
        self.fs
            .symlink(ctx, linkname, parent, name)
            .map(|e| self.guest_entry(e))
    }

    fn mknod(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        name: &CStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        named_creds(ctx)?;
        self.fs
            .mknod(ctx, inode, name, mode, rdev, umask)
            .map(|e| self.guest_entry(e))
    }

    fn mkdir(
        &self,
        ctx: &Context,
        parent: Self::Inode,
        name: &CStr,
        mode: u32,
        umask: u32,
    ) -> io::Result<Entry> {
        named_creds(ctx)?;
        self.fs
            .mkdir(ctx, parent, name, mode, umask)
            .map(|e| self.guest_entry(e))
    }

    fn unlink(&self, ctx: &Context, parent: Self::Inode, name: &CStr) -> io::Result<()> {
        self.fs.unlink(ctx, parent, name)
    }

    fn rmdir(&self, ctx: &Context, parent: Self::Inode, name: &CStr) -> io::Result<()> {
        self.fs.rmdir(ctx, parent, name)
    }

    fn rename(
        &self,
        ctx: &Context,
        olddir: Self::Inode,
        oldname: &CStr,
        newdir: Self::Inode,
        newname: &CStr,
        flags: u32,
    ) -> io::Result<()> {
        self.fs.rename(ctx, olddir, oldname, newdir, newname, flags)
    }

    fn link(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        newparent: Self::Inode,
        newname: &CStr,
    ) -> io::Result<Entry> {
        self.fs
            .link(ctx, inode, newparent, newname)
            .map(|e| self.guest_entry(e))
    }

    fn open(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<Self::Handle>, OpenOptions, Option<u32>)> {
        self.fs.open(ctx, inode, flags, fuse_flags)
    }

    fn create(
        &self,
        ctx: &Context,
        parent: Self::Inode,
        name: &CStr,
        args: CreateIn,
    ) -> io::Result<(Entry, Option<Self::Handle>, OpenOptions, Option<u32>)> {
        named_creds(ctx)?;
        self.fs
            .create(ctx, parent, name, args)
            .map(|(e, handle, options, id)| (self.guest_entry(e), handle, options, id))
    }

    fn read(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        w: &mut dyn ZeroCopyWriter,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        flags: u32,
    ) -> io::Result<usize> {
        self.fs
            .read(ctx, inode, handle, w, size, offset, lock_owner, flags)
    }

    fn write(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        r: &mut dyn ZeroCopyReader,
        size: u32,
        offset: u64,
        lock_owner: Option<u64>,
        delayed_write: bool,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<usize> {
        self.fs.write(
            ctx,
            inode,
            handle,
            r,
            size,
            offset,
            lock_owner,
            delayed_write,
            flags,
            fuse_flags,
        )
    }

    fn flush(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        lock_owner: u64,
    ) -> io::Result<()> {
        self.fs.flush(ctx, inode, handle, lock_owner)
    }

    fn fsync(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        datasync: bool,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.fs.fsync(ctx, inode, datasync, handle)
    }

    fn fallocate(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> io::Result<()> {
        self.fs.fallocate(ctx, inode, handle, mode, offset, length)
    }

    fn release(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
        handle: Self::Handle,
        flush: bool,
        flock_release: bool,
        lock_owner: Option<u64>,
    ) -> io::Result<()> {
        self.fs
            .release(ctx, inode, flags, handle, flush, flock_release, lock_owner)
    }

    fn statfs(&self, ctx: &Context, inode: Self::Inode) -> io::Result<statvfs64> {
        self.fs.statfs(ctx, inode)
    }

    fn setxattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        name: &CStr,
        value: &[u8],
        flags: u32,
    ) -> io::Result<()> {
        self.fs.setxattr(ctx, inode, name, value, flags)
    }

    fn getxattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        self.fs.getxattr(ctx, inode, name, size)
    }

    fn listxattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        size: u32,
    ) -> io::Result<ListxattrReply> {
        self.fs.listxattr(ctx, inode, size)
    }

    fn removexattr(&self, ctx: &Context, inode: Self::Inode, name: &CStr) -> io::Result<()> {
        self.fs.removexattr(ctx, inode, name)
    }

    fn opendir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
    ) -> io::Result<(Option<Self::Handle>, OpenOptions)> {
        self.fs.opendir(ctx, inode, flags)
    }

    fn readdir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry) -> io::Result<usize>,
    ) -> io::Result<()> {
        self.fs.readdir(ctx, inode, handle, size, offset, add_entry)
    }

    fn readdirplus(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        size: u32,
        offset: u64,
        add_entry: &mut dyn FnMut(DirEntry, Entry) -> io::Result<usize>,
    ) -> io::Result<()> {
        let mut translated =
            |dir_entry: DirEntry<'_>, entry: Entry| add_entry(dir_entry, self.guest_entry(entry));
        self.fs
            .readdirplus(ctx, inode, handle, size, offset, &mut translated)
    }

    fn fsyncdir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        datasync: bool,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.fs.fsyncdir(ctx, inode, datasync, handle)
    }

    fn releasedir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.fs.releasedir(ctx, inode, flags, handle)
    }

    fn setupmapping(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        foffset: u64,
        len: u64,
        flags: u64,
        moffset: u64,
        vu_req: &mut dyn FsCacheReqHandler,
    ) -> io::Result<()> {
        self.fs
            .setupmapping(ctx, inode, handle, foffset, len, flags, moffset, vu_req)
    }

    fn removemapping(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        requests: Vec<RemovemappingOne>,
        vu_req: &mut dyn FsCacheReqHandler,
    ) -> io::Result<()> {
        self.fs.removemapping(ctx, inode, requests, vu_req)
    }

    fn access(&self, ctx: &Context, inode: Self::Inode, mask: u32) -> io::Result<()> {
        self.fs.access(ctx, inode, mask)
    }

    fn lseek(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        self.fs.lseek(ctx, inode, handle, offset, whence)
    }

    fn getlk(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        owner: u64,
        lock: FileLock,
        flags: u32,
    ) -> io::Result<FileLock> {
        self.fs.getlk(ctx, inode, handle, owner, lock, flags)
    }

    fn setlk(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        owner: u64,
        lock: FileLock,
        flags: u32,
    ) -> io::Result<()> {
        self.fs.setlk(ctx, inode, handle, owner, lock, flags)
    }

    fn setlkw(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        owner: u64,
        lock: FileLock,
        flags: u32,
    ) -> io::Result<()> {
        self.fs.setlkw(ctx, inode, handle, owner, lock, flags)
    }

    fn ioctl(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        flags: u32,
        cmd: u32,
        data: IoctlData,
        out_size: u32,
    ) -> io::Result<IoctlData<'_>> {
        self.fs
            .ioctl(ctx, inode, handle, flags, cmd, data, out_size)
    }

    fn bmap(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        block: u64,
        blocksize: u32,
    ) -> io::Result<u64> {
        self.fs.bmap(ctx, inode, block, blocksize)
    }

    fn poll(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        khandle: Self::Handle,
        flags: u32,
        events: u32,
    ) -> io::Result<u32> {
        self.fs.poll(ctx, inode, handle, khandle, flags, events)
    }

    fn notify_reply(&self) -> io::Result<()> {
        self.fs.notify_reply()
    }

    /// The request's credentials, guest to host, before the file system served sees them.
    fn id_remap(&self, ctx: &mut Context) -> io::Result<()> {
        ctx.uid = self.uids.to_host(ctx.uid);
        ctx.gid = self.gids.to_host(ctx.gid);
        self.fs.id_remap(ctx)
    }
}

#[cfg(test)]
mod tests {
    /// Every method of the trait is written out here (see `readonly_tests.rs`).
    #[test]
    fn every_trait_method_is_forwarded() {
        crate::virtio_fs::readonly::tests::assert_every_method_written(
            include_str!("id_map_fs.rs"),
            "for IdMapFs<F> {",
            "IdMapFs does not forward",
        );
    }
}
