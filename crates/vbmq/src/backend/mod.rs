//! Storage engines: what a disk's blocks are stored on.
//!
//! A [`Disk`] is shared by all queues of a device; each queue's worker asks it for an [`Engine`]
//! of its own, which it owns outright: no lock is shared between queues on the data path.

pub mod cache;
pub mod changes;
mod crypt;
mod delay;
mod direct_align;
mod discard_off;
mod engine_io;
mod file;
mod handover;
mod host_memory;
mod image_lock;
pub(crate) mod immediate;
mod iovec;
mod layer;
#[cfg(test)]
mod layer_tests;
mod memory;
pub mod mirror;
mod null;
mod ofd_lock;
mod positional;
mod qcow2;
mod rbd;
mod registered_memory;
pub mod ring_pool;
mod snapshot;
mod staging;
pub mod thin;
mod uring;
mod writable_export;
mod write_hook;

use std::io;
use std::os::fd::RawFd;

pub use cache::CachedDisk;
pub use changes::{ChangeMap, TrackedDisk};
pub use crypt::EncryptedDisk;
pub use delay::Delay;
pub use discard_off::DiscardOff;
pub use file::FileDisk;
pub use handover::WriterSeat;
pub use image_lock::release_all as release_image_locks;
pub use iovec::IovList;
pub use layer::{Layer, Layered};
pub use memory::MemoryDisk;
pub use mirror::{MirrorDisk, MirrorState};
pub use null::NullDisk;
pub use qcow2::{
    BackingFile, Backings, CreateOptions as Qcow2CreateOptions, ImageFormat, Qcow2Disk,
    create_image as create_qcow2_image, guard_probed_raw, has_magic as has_qcow2_magic,
    open_backing_files, open_qcow2, thin_base,
};
pub use rbd::{RbdDisk, RbdTarget, cluster_connected, release_clusters};
pub use snapshot::{COPY_BLOCK, Fleece, SnapshotDisk, SnapshotMethod, SnapshotReport};
pub use thin::{NbdBase, ThinBase, ThinDisk, ThinOptions};
pub use writable_export::WritableExport;

/// One operation handed to an engine. Offsets and lengths are in bytes and already checked
/// against the disk's capacity.
#[derive(Clone, Copy, Debug)]
pub enum IoOp {
    /// Read into the buffers of `iov`.
    Read {
        /// Byte offset on the disk.
        offset: u64,
        /// The guest buffers.
        iov: IovList,
    },
    /// Write the buffers of `iov`.
    Write {
        /// Byte offset on the disk.
        offset: u64,
        /// The guest buffers.
        iov: IovList,
    },
    /// Make every completed write durable.
    Flush,
    /// Deallocate a range; it reads back as zeros.
    Discard {
        /// Byte offset on the disk.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// Zero a range, deallocating it if `unmap`.
    WriteZeroes {
        /// Byte offset on the disk.
        offset: u64,
        /// Bytes.
        len: u64,
        /// The range may be deallocated.
        unmap: bool,
    },
}

/// The static properties of a disk that the guest sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Size in bytes, a multiple of 512.
    pub capacity: u64,
    /// Logical block size in bytes (512 or the block device's).
    pub block_size: u32,
    /// log2 of physical blocks per logical block (VIRTIO_BLK_F_TOPOLOGY).
    pub physical_block_exp: u8,
}

/// Operations one guest request may push at most (one per range of a multi-range discard): an
/// engine has room for `depth` times as many completions.
pub const OPS_PER_REQUEST_MAX: u32 = 16;

/// What a queue asks of its engine.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Operations that may be in flight at once.
    pub depth: u32,
    /// Submit everything queued at once (`false`: one system call per operation, an ablation).
    pub batch: bool,
    /// Provide a [`Engine::completion_fd`] for a worker that sleeps.
    pub notify: bool,
}

/// Refuses a new capacity that is not whole blocks, zero, or smaller than `current` without
/// `shrink` (what the guest wrote past it would be lost).
pub(crate) fn check_resize(current: u64, bytes: u64, block: u64, shrink: bool) -> io::Result<()> {
    let invalid = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
    if bytes == 0 || !bytes.is_multiple_of(block) {
        return invalid(format!(
            "{bytes} bytes is not a positive multiple of {block}"
        ));
    }
    if bytes < current && !shrink {
        return invalid(format!(
            "{bytes} bytes is smaller than the disk's {current}: shrinking loses data (force it)"
        ));
    }
    Ok(())
}

/// A disk, shared by the queues of one device (and across reconnections).
pub trait Disk: Send + Sync {
    /// Size and block size.
    fn geometry(&self) -> Geometry;
    /// A new engine for one queue.
    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>>;
    /// Whether discard and write-zeroes are supported.
    fn supports_discard(&self) -> bool;
    /// Engine counters worth logging (a cache's hits and misses, say), as name and value.
    fn stats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Changes the capacity to `bytes` (`shrink`: even if smaller) and returns the new
    /// capacity. Only disks that can grow say yes; the device checks requests against what this
    /// returns, so an engine never sees an offset past its storage.
    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        let _ = (bytes, shrink);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kind of disk cannot be resized",
        ))
    }
    /// Calls `listener` with the new capacity whenever the storage changes size by itself (an
    /// RBD image resized by another client). Disks that only change size through
    /// [`Disk::resize`] never call it.
    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = listener;
    }
    /// Releases what would outlive the process, once every queue is quiesced at exit (an RBD
    /// image's exclusive lock, which a killed client holds until the cluster times it out).
    /// No engine may submit afterwards.
    fn close(&self) {}
    /// Where `track-changes=on` keeps its checkpoints if the image itself can (a qcow2 image's
    /// persistent bitmaps) rather than in `DISK.changes`.
    fn image_bitmaps(&self) -> Option<std::sync::Arc<dyn changes::ImageBitmaps>> {
        None
    }
    /// Why an export of the disk below would not serve this disk's contents, if it would not
    /// (none today: a cipher decrypts in [`Disk::export_view`]).
    fn export_refused(&self) -> Option<&'static str> {
        None
    }
    /// What an export of the disk below serves as this disk's contents (a cipher decrypts);
    /// the builder applies each layer's in turn, bottom up (`devices::Handles`).
    fn export_view(
        &self,
        export: std::sync::Arc<dyn crate::nbd::Export>,
    ) -> std::sync::Arc<dyn crate::nbd::Export> {
        export
    }
}

/// A queue's private I/O engine. Operations are queued with [`Engine::push`], handed to the
/// kernel together by [`Engine::submit`], and their results come back by tag through
/// [`Engine::reap`].
pub trait Engine: Send {
    /// Queues an operation. The iovecs it points to stay valid until its completion is reaped.
    /// An error means the operation was not queued and will never complete; once queued, it
    /// completes only through [`Engine::reap`].
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()>;
    /// Hands every queued operation to the device, in one system call at most.
    fn submit(&mut self) -> io::Result<()>;
    /// Hands queued operations over and blocks until at least one completion is ready.
    fn wait(&mut self) -> io::Result<()>;
    /// Calls `done(tag, result)` for every completed operation; `result` is bytes or `-errno`.
    fn reap(&mut self, done: &mut dyn FnMut(u64, i32));
    /// An eventfd that becomes readable when completions arrive, for sleeping workers.
    fn completion_fd(&self) -> Option<RawFd>;
    /// The guest's memory is now `regions` (host mappings; none: the guest is gone). Engines
    /// that register buffers with the kernel do it here; the worker calls it with nothing in
    /// flight.
    ///
    /// # Safety
    ///
    /// The regions stay mapped until the next call or until the engine is dropped.
    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        let _ = regions;
        Ok(())
    }
}

impl<E: Engine + ?Sized> Engine for Box<E> {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        (**self).push(op, tag)
    }

    fn submit(&mut self) -> io::Result<()> {
        (**self).submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        (**self).wait()
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        (**self).reap(done);
    }

    fn completion_fd(&self) -> Option<RawFd> {
        (**self).completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { (**self).guest_memory(regions) }
    }
}
