//! Raw image files and block devices.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::held_files::{self, Held};

use super::direct_align::direct_alignment;
use super::handover::WriterSeat;
use super::image_lock::ImageLock;
use super::immediate::Immediate;
use super::positional::PositionalIo;
use super::uring::{BaseFiles, FileKind, RingOptions, UringEngine};
use super::{Disk, Engine, EngineOptions, Geometry};

// Block-device ioctls from <linux/fs.h>, which libc does not carry.
const BLKSSZGET: libc::c_ulong = 0x1268;
const BLKPBSZGET: libc::c_ulong = 0x127b;
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

/// A raw image file or a block device, served through io_uring. The image is opened once, when
/// the disk is: every queue's engine of every connection works on those same open files, so a
/// rename or replacement of the path later changes nothing.
pub struct FileDisk {
    readonly: bool,
    geometry: Geometry,
    /// The capacity now: a regular file grows (or shrinks) with `resize`.
    capacity: AtomicU64,
    kind: FileKind,
    /// The image, through the page cache.
    buffered: OwnedFd,
    /// The image with `O_DIRECT`, unless `direct=off`.
    direct: Option<OwnedFd>,
    /// What `O_DIRECT` needs aligned (offsets, lengths, buffers); accesses that are not go
    /// through the page cache instead.
    direct_align: usize,
    lock: Option<ImageLock>,
    /// The image is in use: no snapshot is written into it (see [`held_files`]).
    _held: Held,
    /// SQPOLL and fixed buffers for every queue's ring.
    ring: RingOptions,
    /// No ring of its own: each queue takes a spare ring from the pool (see `ring_pool`), or
    /// does its I/O with positional system calls (see [`PositionalIo`]) when none is left.
    positional: bool,
    /// Queues served on a pooled ring, and with positional I/O, since the disk was opened.
    pooled_queues: AtomicU64,
    positional_queues: AtomicU64,
}

fn ioctl_value<T: Default>(file: &File, request: libc::c_ulong) -> io::Result<T> {
    let mut value = T::default();
    // SAFETY: each request used here writes one value of type `T` through the pointer.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), request, &mut value as *mut T) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

impl FileDisk {
    /// Opens the image at `path` (once: see the type) and learns its size and block size.
    pub fn open(path: &Path, readonly: bool, direct: bool) -> io::Result<Self> {
        let file = Self::open_file(path, readonly, false)?;
        let direct = if direct {
            // Fail now, not on the first request, where O_DIRECT is refused.
            let direct = Self::open_file(path, readonly, true)?;
            if !same_file(&direct, &file)? {
                return Err(io::Error::other("replaced while it was being opened"));
            }
            Some(direct)
        } else {
            None
        };
        Self::from_files(file, direct, readonly)
    }

    /// The image open as `file` (buffered) and `direct` (the same file with `O_DIRECT`; none for
    /// `direct=off`), each opened read-only if `readonly` and read-write otherwise: what
    /// [`FileDisk::open`] opens, or what a client passed (see `crate::passed_fds`).
    pub fn from_files(file: File, direct: Option<File>, readonly: bool) -> io::Result<Self> {
        let metadata = file.metadata()?;
        let (capacity, block_size, physical) = if metadata.file_type().is_block_device() {
            let size: u64 = ioctl_value(&file, BLKGETSIZE64)?;
            let logical: libc::c_int = ioctl_value(&file, BLKSSZGET)?;
            let physical: libc::c_uint = ioctl_value(&file, BLKPBSZGET)?;
            (size, logical.max(512).unsigned_abs(), physical.max(512))
        } else if metadata.is_file() {
            (metadata.len(), 512, 512)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or a block device",
            ));
        };
        let block_size = block_size.clamp(512, 65536);
        // The guest addresses whole logical blocks: a partial last block is not exposed.
        let capacity = capacity - capacity % u64::from(block_size);
        let kind = if metadata.file_type().is_block_device() {
            FileKind::BlockDevice {
                discard: Self::device_discards(metadata.rdev()),
            }
        } else {
            let tmpfs = Self::is_tmpfs(&file);
            FileKind::Regular {
                zero_range: !tmpfs && fallocate_works(&file, libc::FALLOC_FL_ZERO_RANGE),
                punch_hole: fallocate_works(&file, libc::FALLOC_FL_PUNCH_HOLE),
                inline_rw: tmpfs,
            }
        };
        let (direct, direct_align) = match direct {
            Some(direct) => {
                let align = direct_alignment(&direct).max(block_size as usize);
                (Some(direct.into()), align)
            }
            None => (None, 1),
        };
        // Guests that align to the physical block size keep to the direct path.
        let physical = physical.max(u32::try_from(direct_align).unwrap_or(512));
        // A power of two up to 2^31: its exponent fits a byte.
        let physical_block_exp =
            u8::try_from((physical / block_size).max(1).trailing_zeros()).unwrap_or(0);
        let held = held_files::hold(&file)?;
        Ok(FileDisk {
            readonly,
            buffered: file.into(),
            direct,
            direct_align,
            lock: None,
            _held: held,
            ring: RingOptions::default(),
            positional: false,
            pooled_queues: AtomicU64::new(0),
            positional_queues: AtomicU64::new(0),
            capacity: AtomicU64::new(capacity),
            geometry: Geometry {
                capacity,
                block_size,
                physical_block_exp,
            },
            kind,
        })
    }

    fn open_file(path: &Path, readonly: bool, direct: bool) -> io::Result<File> {
        let mut options = OpenOptions::new();
        options.read(true).write(!readonly);
        if direct {
            options.custom_flags(libc::O_DIRECT);
        }
        options.open(path)
    }

    /// Locks the image against other processes: shared if the disk is read-only, exclusive if
    /// it is writable (see [`ImageLock`]).
    /// With `handover`, a writable disk locks the image only while it writes, so that another
    /// `handover=on` disk, of this process or another, can take over (see `super::handover`).
    pub fn lock(mut self, handover: bool) -> io::Result<Self> {
        let file = File::from(self.buffered.try_clone()?);
        self.lock = Some(if handover && !self.readonly {
            ImageLock::take_handover(&file)?
        } else {
            ImageLock::take(&file, !self.readonly)?
        });
        Ok(self)
    }

    /// The disk's hold on its image, when it was locked with `handover`.
    pub fn writer_seat(&self) -> Option<Arc<WriterSeat>> {
        self.lock.as_ref().and_then(ImageLock::seat)
    }

    /// Sends every read and write through io_uring, even where they would be done on the queue's
    /// thread (files whose reads the kernel hands to workers: see `UringEngine`).
    pub fn ring_only(mut self) -> Self {
        if let FileKind::Regular { inline_rw, .. } = &mut self.kind {
            *inline_rw = false;
        }
        self
    }

    /// Serves every queue on a spare ring of the pool, or without a ring (see [`PositionalIo`])
    /// when the pool is empty: for a disk added once the process is confined, when no ring can
    /// be created any more.
    pub fn positional(mut self) -> Self {
        self.positional = true;
        self
    }

    /// Has each queue's ring polled for submissions by a kernel thread on `cpu` (SQPOLL).
    pub fn sqpoll(mut self, cpu: usize) -> io::Result<Self> {
        let cpu = u32::try_from(cpu)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CPU number too large"))?;
        self.ring.sqpoll = Some(cpu);
        Ok(self)
    }

    /// Has each queue's ring register the guest's memory as fixed buffers.
    pub fn fixed_buffers(mut self) -> Self {
        self.ring.fixed_buffers = true;
        self
    }

    /// The `O_DIRECT` (or buffered again) and buffered descriptors, duplicated: the image
    /// opened at start, never the path again; positional I/O shares no offset.
    fn descriptors(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        let buffered = self.buffered.try_clone()?;
        let direct = match &self.direct {
            Some(direct) => direct.try_clone()?,
            None => buffered.try_clone()?,
        };
        Ok((direct, buffered))
    }

    /// A queue's engine over this image, with `base` registered on its ring too.
    pub(super) fn uring_engine(
        &self,
        options: EngineOptions,
        base: Option<BaseFiles>,
    ) -> io::Result<UringEngine> {
        let (direct, buffered) = self.descriptors()?;
        let align = self.direct_align;
        UringEngine::with_base(direct, buffered, align, self.kind, options, self.ring, base)
    }

    /// Whether each queue takes a spare ring from the pool (see [`FileDisk::positional`]).
    pub(super) fn is_pooled(&self) -> bool {
        self.positional || super::ring_pool::sealed()
    }

    /// A queue's engine over this image on a spare ring of the pool, with `base` registered
    /// too; `None` when the pool is empty.
    pub(super) fn pooled_engine(
        &self,
        options: EngineOptions,
        base: Option<BaseFiles>,
    ) -> Option<io::Result<UringEngine>> {
        let (direct, buffered) = match self.descriptors() {
            Ok(fds) => fds,
            Err(e) => return Some(Err(e)),
        };
        let engine = UringEngine::pooled(
            direct,
            buffered,
            self.direct_align,
            self.kind,
            options,
            base,
        );
        if matches!(engine, Some(Ok(_))) {
            self.pooled_queues.fetch_add(1, Ordering::Relaxed);
        }
        engine
    }

    /// This image as another disk's base, read through that disk's rings.
    pub(super) fn as_base(&self) -> io::Result<BaseFiles> {
        let (direct, buffered) = self.descriptors()?;
        let inline_rw = matches!(
            self.kind,
            FileKind::Regular {
                inline_rw: true,
                ..
            }
        );
        Ok(BaseFiles {
            direct,
            buffered,
            align: self.direct_align,
            inline_rw,
        })
    }

    /// The image through the page cache (a duplicate descriptor).
    pub(super) fn file(&self) -> io::Result<File> {
        Ok(File::from(self.buffered.try_clone()?))
    }

    /// Whether the block device `rdev` accepts discards (its queue says how many bytes).
    fn device_discards(rdev: u64) -> bool {
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let path = format!("/sys/dev/block/{major}:{minor}/queue/discard_max_bytes");
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .is_some_and(|bytes| bytes > 0)
    }

    /// tmpfs cannot `FALLOC_FL_ZERO_RANGE`; a hole reads back as zeros there too.
    fn is_tmpfs(file: &File) -> bool {
        let mut stat = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: fstatfs fills the struct it is given.
        let ret = unsafe { libc::fstatfs(file.as_raw_fd(), stat.as_mut_ptr()) };
        // SAFETY: fstatfs succeeded, so the struct is initialised.
        ret == 0 && unsafe { stat.assume_init() }.f_type == libc::TMPFS_MAGIC
    }
}

impl Disk for FileDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.capacity.load(Ordering::Relaxed),
            ..self.geometry
        }
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        let block = u64::from(self.geometry.block_size);
        let current = self.capacity.load(Ordering::Relaxed);
        super::check_resize(current, bytes, block, shrink)?;
        if self.readonly {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "a readonly=on disk is not resized",
            ));
        }
        let file = File::from(self.buffered.try_clone()?);
        if let FileKind::BlockDevice { .. } = self.kind {
            // A block device's size is the device's: vbmq only learns it anew.
            // (Its end, as lseek finds it: the size ioctl is not allowed once confined.)
            let size = std::io::Seek::seek(&mut &file, std::io::SeekFrom::End(0))?;
            let size = size - size % block;
            if size != bytes {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the block device has {size} bytes: resize the device, then ask for that"
                    ),
                ));
            }
        } else {
            file.set_len(bytes)?;
        }
        self.capacity.store(bytes, Ordering::Relaxed);
        Ok(bytes)
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        if self.is_pooled() {
            // The image opened at start, never the path again; positional I/O shares no offset.
            let (direct, buffered) = self.descriptors()?;
            match UringEngine::pooled(
                direct.try_clone()?,
                buffered.try_clone()?,
                self.direct_align,
                self.kind,
                options,
                None,
            ) {
                Some(Ok(engine)) => {
                    self.pooled_queues.fetch_add(1, Ordering::Relaxed);
                    return Ok(Box::new(engine));
                }
                Some(Err(e)) => crate::limited!(
                    warn,
                    "a queue cannot use a spare ring ({e}): served without io_uring"
                ),
                None => crate::limited!(
                    warn,
                    "no spare io_uring ring left: a queue is served without io_uring, one \
                     request at a time (raise --run-time-rings)"
                ),
            }
            self.positional_queues.fetch_add(1, Ordering::Relaxed);
            let io = PositionalIo {
                direct,
                buffered,
                align: self.direct_align,
                kind: self.kind,
            };
            return Ok(Box::new(Immediate::new(io, options.depth)));
        }
        Ok(Box::new(self.uring_engine(options, None)?))
    }

    fn supports_discard(&self) -> bool {
        !self.readonly
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        if !self.positional {
            return Vec::new();
        }
        vec![
            (
                "pooled_ring_queues",
                self.pooled_queues.load(Ordering::Relaxed),
            ),
            (
                "positional_queues",
                self.positional_queues.load(Ordering::Relaxed),
            ),
        ]
    }
}

/// Whether two open files are the same file.
fn same_file(a: &File, b: &File) -> io::Result<bool> {
    let (a, b) = (a.metadata()?, b.metadata()?);
    Ok(a.dev() == b.dev() && a.ino() == b.ino())
}

/// Whether `fallocate` with `mode` works on this file: tried on a block past its end with
/// `KEEP_SIZE`, where it changes nothing (a read-only file says no).
fn fallocate_works(file: &File, mode: libc::c_int) -> bool {
    let Ok(metadata) = file.metadata() else {
        return false;
    };
    let Ok(end) = libc::off_t::try_from(metadata.len().next_multiple_of(4096)) else {
        return false;
    };
    // SAFETY: fallocate on an open descriptor; no memory is passed.
    let ret = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            mode | libc::FALLOC_FL_KEEP_SIZE,
            end,
            4096,
        )
    };
    ret == 0
}
