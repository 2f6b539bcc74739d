//! `readonly=on`, enforced by the file system the server calls: [`ReadOnlyFs`] refuses every
//! method that could change the share with `EROFS` and forwards the others. Each method of
//! [`FileSystem`] is written out, none left to the trait's defaults: a method fuse-backend-rs adds
//! must be decided here too (the test `every_trait_method_is_decided` reads the trait's source
//! and fails on a method missing here).

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

/// A file system that cannot be changed through it.
pub struct ReadOnlyFs<F>(pub F);

fn refused<T>() -> io::Result<T> {
    Err(io::Error::from_raw_os_error(libc::EROFS))
}

/// An open that could change the file: write access (or an invalid access mode) or `O_TRUNC`
/// (Linux truncates even on `O_RDONLY`).
pub(super) fn opens_for_writing(flags: u32) -> bool {
    let flags = flags.cast_signed();
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl<F: FileSystem> FileSystem for ReadOnlyFs<F> {
    type Inode = F::Inode;
    type Handle = F::Handle;

    fn init(&self, capable: FsOptions) -> io::Result<FsOptions> {
        self.0.init(capable)
    }

    fn destroy(&self) {
        self.0.destroy();
    }

    fn lookup(&self, ctx: &Context, parent: Self::Inode, name: &CStr) -> io::Result<Entry> {
        self.0.lookup(ctx, parent, name)
    }

    fn forget(&self, ctx: &Context, inode: Self::Inode, count: u64) {
        self.0.forget(ctx, inode, count);
    }

    fn batch_forget(&self, ctx: &Context, requests: Vec<(Self::Inode, u64)>) {
        self.0.batch_forget(ctx, requests);
    }

    fn getattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Option<Self::Handle>,
    ) -> io::Result<(stat64, Duration)> {
        self.0.getattr(ctx, inode, handle)
    }

    fn setattr(
        &self,
        _: &Context,
        _: Self::Inode,
        _: stat64,
        _: Option<Self::Handle>,
        _: SetattrValid,
    ) -> io::Result<(stat64, Duration)> {
        refused()
    }

    fn readlink(&self, ctx: &Context, inode: Self::Inode) -> io::Result<Vec<u8>> {
        self.0.readlink(ctx, inode)
    }

    fn symlink(&self, _: &Context, _: &CStr, _: Self::Inode, _: &CStr) -> io::Result<Entry> {
        refused()
    }

    fn mknod(
        &self,
        _: &Context,
        _: Self::Inode,
        _: &CStr,
        _: u32,
        _: u32,
        _: u32,
    ) -> io::Result<Entry> {
        refused()
    }

    fn mkdir(&self, _: &Context, _: Self::Inode, _: &CStr, _: u32, _: u32) -> io::Result<Entry> {
        refused()
    }

    fn unlink(&self, _: &Context, _: Self::Inode, _: &CStr) -> io::Result<()> {
        refused()
    }

    fn rmdir(&self, _: &Context, _: Self::Inode, _: &CStr) -> io::Result<()> {
        refused()
    }

    fn rename(
        &self,
        _: &Context,
        _: Self::Inode,
        _: &CStr,
        _: Self::Inode,
        _: &CStr,
        _: u32,
    ) -> io::Result<()> {
        refused()
    }

    fn link(&self, _: &Context, _: Self::Inode, _: Self::Inode, _: &CStr) -> io::Result<Entry> {
        refused()
    }

    fn open(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
        fuse_flags: u32,
    ) -> io::Result<(Option<Self::Handle>, OpenOptions, Option<u32>)> {
        if opens_for_writing(flags) {
            return refused();
        }
        self.0.open(ctx, inode, flags, fuse_flags)
    }

    /// Refused whatever its flags: it makes a file.
    fn create(
        &self,
        _: &Context,
        _: Self::Inode,
        _: &CStr,
        _: CreateIn,
    ) -> io::Result<(Entry, Option<Self::Handle>, OpenOptions, Option<u32>)> {
        refused()
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
        self.0
            .read(ctx, inode, handle, w, size, offset, lock_owner, flags)
    }

    fn write(
        &self,
        _: &Context,
        _: Self::Inode,
        _: Self::Handle,
        _: &mut dyn ZeroCopyReader,
        _: u32,
        _: u64,
        _: Option<u64>,
        _: bool,
        _: u32,
        _: u32,
    ) -> io::Result<usize> {
        refused()
    }

    fn flush(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        lock_owner: u64,
    ) -> io::Result<()> {
        self.0.flush(ctx, inode, handle, lock_owner)
    }

    /// Forwarded: a handle here was opened read-only, and syncing it changes nothing.
    fn fsync(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        datasync: bool,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.0.fsync(ctx, inode, datasync, handle)
    }

    fn fallocate(
        &self,
        _: &Context,
        _: Self::Inode,
        _: Self::Handle,
        _: u32,
        _: u64,
        _: u64,
    ) -> io::Result<()> {
        refused()
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
        self.0
            .release(ctx, inode, flags, handle, flush, flock_release, lock_owner)
    }

    fn statfs(&self, ctx: &Context, inode: Self::Inode) -> io::Result<statvfs64> {
        self.0.statfs(ctx, inode)
    }

    fn setxattr(&self, _: &Context, _: Self::Inode, _: &CStr, _: &[u8], _: u32) -> io::Result<()> {
        refused()
    }

    fn getxattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        name: &CStr,
        size: u32,
    ) -> io::Result<GetxattrReply> {
        self.0.getxattr(ctx, inode, name, size)
    }

    fn listxattr(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        size: u32,
    ) -> io::Result<ListxattrReply> {
        self.0.listxattr(ctx, inode, size)
    }

    fn removexattr(&self, _: &Context, _: Self::Inode, _: &CStr) -> io::Result<()> {
        refused()
    }

    fn opendir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
    ) -> io::Result<(Option<Self::Handle>, OpenOptions)> {
        if opens_for_writing(flags) {
            return refused();
        }
        self.0.opendir(ctx, inode, flags)
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
        self.0.readdir(ctx, inode, handle, size, offset, add_entry)
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
        self.0
            .readdirplus(ctx, inode, handle, size, offset, add_entry)
    }

    fn fsyncdir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        datasync: bool,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.0.fsyncdir(ctx, inode, datasync, handle)
    }

    fn releasedir(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        flags: u32,
        handle: Self::Handle,
    ) -> io::Result<()> {
        self.0.releasedir(ctx, inode, flags, handle)
    }

    /// Refused, even without write permission: vbmq offers no DAX window, and a shared mapping
    /// is a way to write the file whatever its flags say.
    fn setupmapping(
        &self,
        _: &Context,
        _: Self::Inode,
        _: Self::Handle,
        _: u64,
        _: u64,
        _: u64,
        _: u64,
        _: &mut dyn FsCacheReqHandler,
    ) -> io::Result<()> {
        refused()
    }

    fn removemapping(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        requests: Vec<RemovemappingOne>,
        vu_req: &mut dyn FsCacheReqHandler,
    ) -> io::Result<()> {
        self.0.removemapping(ctx, inode, requests, vu_req)
    }

    /// A request for write access gets `EROFS`, as on a read-only mount.
    fn access(&self, ctx: &Context, inode: Self::Inode, mask: u32) -> io::Result<()> {
        if mask.cast_signed() & libc::W_OK != 0 {
            return refused();
        }
        self.0.access(ctx, inode, mask)
    }

    fn lseek(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        offset: u64,
        whence: u32,
    ) -> io::Result<u64> {
        self.0.lseek(ctx, inode, handle, offset, whence)
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
        self.0.getlk(ctx, inode, handle, owner, lock, flags)
    }

    /// Forwarded: a lock changes no byte or attribute of the file.
    fn setlk(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        handle: Self::Handle,
        owner: u64,
        lock: FileLock,
        flags: u32,
    ) -> io::Result<()> {
        self.0.setlk(ctx, inode, handle, owner, lock, flags)
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
        self.0.setlkw(ctx, inode, handle, owner, lock, flags)
    }

    /// Refused: what an ioctl does (`FS_IOC_SETFLAGS`, say) cannot be told from its number.
    fn ioctl(
        &self,
        _: &Context,
        _: Self::Inode,
        _: Self::Handle,
        _: u32,
        _: u32,
        _: IoctlData,
        _: u32,
    ) -> io::Result<IoctlData<'_>> {
        refused()
    }

    fn bmap(
        &self,
        ctx: &Context,
        inode: Self::Inode,
        block: u64,
        blocksize: u32,
    ) -> io::Result<u64> {
        self.0.bmap(ctx, inode, block, blocksize)
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
        self.0.poll(ctx, inode, handle, khandle, flags, events)
    }

    fn notify_reply(&self) -> io::Result<()> {
        self.0.notify_reply()
    }

    fn id_remap(&self, ctx: &mut Context) -> io::Result<()> {
        self.0.id_remap(ctx)
    }
}

#[cfg(test)]
#[path = "readonly_tests.rs"]
pub(super) mod tests;
