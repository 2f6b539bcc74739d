//! The io_uring engine: one ring per queue, the disk's files registered with it, everything
//! queued in one pass handed to the kernel in one `io_uring_enter`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use io_uring::{IoUring, opcode, squeue, types};
use vmm_sys_util::eventfd::{EFD_NONBLOCK, EventFd};

use super::registered_memory::{self, RegisteredMemory};
use super::ring_pool::{self, PooledRing};
use super::{Engine, EngineOptions, IoOp, IovList, OPS_PER_REQUEST_MAX};
use crate::confine::{RingPolicy, restrict_ring};
use crate::host_size;

/// Registered-file index of the `O_DIRECT` descriptor.
const DIRECT: types::Fixed = types::Fixed(0);
/// Registered-file index of the buffered descriptor, for buffers `O_DIRECT` cannot take.
const BUFFERED: types::Fixed = types::Fixed(1);
/// How far a base image's descriptors sit past the disk's own (`base=`: see [`BaseFiles`]).
const BASE_SHIFT: u32 = 2;

/// How long an SQPOLL thread spins without work before it sleeps until the next submission
/// wakes it (one system call then).
const SQPOLL_IDLE_MS: u32 = 10;

/// `BLOCK_URING_CMD_DISCARD` from <linux/blkdev.h>: `_IO(0x12, 0)`, Linux 6.12.
const BLOCK_URING_CMD_DISCARD: u32 = 0x1200;

/// What the engine's file is, which decides how discard and write-zeroes are carried out.
#[derive(Clone, Copy, Debug)]
pub enum FileKind {
    /// A regular file. `zero_range` and `punch_hole`: those `fallocate` modes work (tmpfs lacks
    /// zero-range, NFSv3 and many FUSE file systems both). `inline_rw`: reads and writes are
    /// done on the queue's thread, not through the ring (see [`UringEngine`]).
    Regular {
        zero_range: bool,
        punch_hole: bool,
        inline_rw: bool,
    },
    /// A block device. `discard`: the device accepts discards.
    BlockDevice { discard: bool },
}

/// How a disk's rings are set up, beyond what each queue asks for.
#[derive(Clone, Copy, Debug, Default)]
pub struct RingOptions {
    /// Submissions taken by a kernel thread spinning on this CPU (`sqpoll=`).
    pub sqpoll: Option<u32>,
    /// The guest's memory registered as fixed buffers (`fixed-buffers=on`).
    pub fixed_buffers: bool,
}

/// A read-only base image read through the same ring as the disk (`base=`): its `O_DIRECT`
/// and buffered descriptors are registered after the disk's.
pub struct BaseFiles {
    /// The base with `O_DIRECT` (or buffered again, with `direct=off`).
    pub direct: OwnedFd,
    /// The base through the page cache.
    pub buffered: OwnedFd,
    /// What `O_DIRECT` needs aligned on the base.
    pub align: usize,
    /// Reads are done on the queue's thread (a tmpfs base: see [`UringEngine`]).
    pub inline_rw: bool,
}

/// An engine over one file, through a private io_uring.
///
/// A file whose reads the kernel cannot start without possibly blocking (tmpfs: no
/// `FMODE_NOWAIT`) makes io_uring hand every read and write to a kernel worker thread: two
/// context switches, and a thread competing with the queue's for its CPU. For such files,
/// reads and writes are plain `preadv`/`pwritev` on the queue's own thread, a copy from or to
/// the page cache; flush, discard and write-zeroes still go through the ring.
pub struct UringEngine {
    ring: Ring,
    /// Operations pushed on the ring whose completions are not reaped yet.
    in_ring: u64,
    /// Buffers and offsets `O_DIRECT` accepts are multiples of this; others go buffered.
    align: usize,
    kind: FileKind,
    batch: bool,
    queued: u32,
    notifier: Option<EventFd>,
    /// Results of reads and writes done at push time, waiting to be reaped.
    inline_done: Vec<(u64, i32)>,
    /// The `O_DIRECT` and buffered descriptors, registered with the ring.
    files: [OwnedFd; 2],
    /// The guest memory registered as fixed buffers, with `fixed-buffers=on`.
    fixed: Option<RegisteredMemory>,
    /// The base image's descriptors (registered at 2 and 3), alignment and inline reads.
    base: Option<([OwnedFd; 2], usize, bool)>,
    /// Operations address the base, not the disk (set only inside [`UringEngine::push_base_read`]).
    on_base: bool,
}

impl UringEngine {
    /// A ring over `direct` (possibly the same file as `buffered`) with room for
    /// `options.depth` operations, set up as `ring` says; with `base`, a base image's files
    /// are registered too, for [`UringEngine::push_base_read`].
    pub fn with_base(
        direct: OwnedFd,
        buffered: OwnedFd,
        align: usize,
        kind: FileKind,
        options: EngineOptions,
        ring: RingOptions,
        base: Option<BaseFiles>,
    ) -> io::Result<Self> {
        let (sqpoll, fixed_buffers) = (ring.sqpoll, ring.fixed_buffers);
        let entries = options.depth.max(8).next_power_of_two();
        // Room for every completion that can be outstanding: a request is at most
        // `OPS_PER_REQUEST_MAX` operations (a multi-range discard). Completions past the CQ would
        // wait in the kernel's overflow list until an enter with GETEVENTS (see `submit`).
        let cq_entries = entries.saturating_mul(OPS_PER_REQUEST_MAX);
        // Created disabled so that, once the files and the eventfd are registered, the ring is
        // restricted to vbmq's opcodes on registered files before it accepts any SQE.
        let mut builder = IoUring::builder();
        builder
            .setup_cqsize(cq_entries)
            .setup_clamp()
            .setup_r_disabled();
        if let Some(cpu) = sqpoll {
            // Pinned: it would otherwise inherit the queue thread's CPU and compete with it.
            builder.setup_sqpoll(SQPOLL_IDLE_MS).setup_sqpoll_cpu(cpu);
        }
        let ring = builder.build(entries)?;
        let mut fds = vec![direct.as_raw_fd(), buffered.as_raw_fd()];
        if let Some(base) = &base {
            fds.extend([base.direct.as_raw_fd(), base.buffered.as_raw_fd()]);
        }
        ring.submitter().register_files(&fds)?;
        let notifier = if options.notify {
            let fd = EventFd::new(EFD_NONBLOCK)?;
            ring.submitter().register_eventfd(fd.as_raw_fd())?;
            Some(fd)
        } else {
            None
        };
        let policy = RingPolicy {
            extra_ops: &[opcode::UringCmd16::CODE],
            // Registering guest memory again when the memory table changes.
            register_ops: if fixed_buffers {
                registered_memory::REGISTER_OPS
            } else {
                &[]
            },
            fixed_files_only: true,
        };
        restrict_ring(&ring.submitter(), &policy)?;
        Ok(UringEngine {
            ring: Ring::Own(ring),
            in_ring: 0,
            align,
            kind,
            inline_done: Vec::with_capacity(entries as usize),
            batch: options.batch,
            queued: 0,
            notifier,
            files: [direct, buffered],
            fixed: fixed_buffers.then(RegisteredMemory::default),
            base: base.map(|b| ([b.direct, b.buffered], b.align, b.inline_rw)),
            on_base: false,
        })
    }

    /// Queues a read of the base image (see [`BaseFiles`]); as [`Engine::push`] otherwise.
    pub fn push_base_read(&mut self, offset: u64, iov: IovList, tag: u64) -> io::Result<()> {
        if self.base.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no base image"));
        }
        self.on_base = true;
        let pushed = self.push(IoOp::Read { offset, iov }, tag);
        self.on_base = false;
        pushed
    }

    /// The descriptors, alignment and inline flag of the file operations now address.
    fn target(&self) -> (&[OwnedFd; 2], usize, bool) {
        match (&self.base, self.on_base) {
            (Some((files, align, inline)), true) => (files, *align, *inline),
            _ => {
                let inline = matches!(
                    self.kind,
                    FileKind::Regular {
                        inline_rw: true,
                        ..
                    }
                );
                (&self.files, self.align, inline)
            }
        }
    }

    /// An engine on a spare ring of the pool (see `ring_pool`), for a disk added once the
    /// process is confined, with `base`'s files in the slots after the disk's (as
    /// [`UringEngine::with_base`]); `None` when the pool is empty. No SQPOLL, no fixed buffers.
    pub fn pooled(
        direct: OwnedFd,
        buffered: OwnedFd,
        align: usize,
        kind: FileKind,
        options: EngineOptions,
        base: Option<BaseFiles>,
    ) -> Option<io::Result<Self>> {
        if options.depth > ring_pool::POOLED_DEPTH {
            return None;
        }
        let mut fds = vec![direct.as_raw_fd(), buffered.as_raw_fd()];
        if let Some(base) = &base {
            fds.extend([base.direct.as_raw_fd(), base.buffered.as_raw_fd()]);
        }
        let ring = match ring_pool::take(&fds)? {
            Ok(ring) => ring,
            Err(e) => return Some(Err(e)),
        };
        let notifier = if options.notify {
            match ring.eventfd().try_clone() {
                Ok(fd) => Some(fd),
                Err(e) => return Some(Err(e)),
            }
        } else {
            None
        };
        Some(Ok(UringEngine {
            ring: Ring::Pooled(ring),
            in_ring: 0,
            align,
            kind,
            inline_done: Vec::with_capacity(options.depth as usize),
            batch: options.batch,
            queued: 0,
            notifier,
            files: [direct, buffered],
            fixed: None,
            base: base.map(|b| ([b.direct, b.buffered], b.align, b.inline_rw)),
            on_base: false,
        }))
    }

    /// The result of an operation done at once on this thread, or `None` for the ring: reads and
    /// writes of files the ring would hand to kernel workers, discards the storage cannot do
    /// (advisory: they succeed), and write-zeroes where no `fallocate` mode can zero.
    fn immediate(&self, op: IoOp) -> Option<i32> {
        if matches!(op, IoOp::Read { .. } | IoOp::Write { .. }) {
            return if self.target().2 {
                self.inline_rw(op)
            } else {
                None
            };
        }
        match (self.kind, op) {
            (
                FileKind::Regular {
                    punch_hole: false, ..
                }
                | FileKind::BlockDevice { discard: false },
                IoOp::Discard { .. },
            ) => Some(0),
            (
                FileKind::Regular {
                    zero_range: false,
                    punch_hole: false,
                    ..
                },
                IoOp::WriteZeroes { offset, len, .. },
            ) => Some(self.write_zeroes_by_hand(offset, len)),
            _ => None,
        }
    }

    /// Zeroes `[offset, offset + len)` with writes of a zero buffer through the buffered file.
    fn write_zeroes_by_hand(&self, mut offset: u64, len: u64) -> i32 {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let fd = self.files[BUFFERED.0 as usize].as_raw_fd();
        let end = offset.saturating_add(len);
        while offset < end {
            let n = host_size(end - offset).min(ZEROS.len());
            let Ok(at) = libc::off_t::try_from(offset) else {
                return -libc::EINVAL;
            };
            // SAFETY: writes `n <= ZEROS.len()` bytes from a static buffer.
            let ret = unsafe { libc::pwrite(fd, ZEROS.as_ptr().cast(), n, at) };
            match ret {
                r if r > 0 => offset += r.unsigned_abs() as u64,
                0 => return -libc::EIO,
                _ => {
                    let errno = io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EIO);
                    if errno != libc::EINTR {
                        return -errno;
                    }
                }
            }
        }
        0
    }

    /// Reads or writes at once with `pread`/`pwrite` (one segment) or `preadv`/`pwritev`; `None`
    /// for other operations.
    fn inline_rw(&self, op: IoOp) -> Option<i32> {
        let (write, offset, list) = match op {
            IoOp::Read { offset, iov } => (false, offset, iov),
            IoOp::Write { offset, iov } => (true, offset, iov),
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => return None,
        };
        let index = self.file_for(offset, list).0 as usize;
        let fd = self.target().0[index % 2].as_raw_fd();
        let (iov, count) = (list.as_ptr(), list.count());
        let offset = offset.cast_signed(); // below the capacity, itself below 2^63
        // SAFETY: the worker guarantees `iov` points to `count` iovecs over mapped guest memory
        // (device-writable for reads), valid for the duration of the call. One segment (most
        // requests) goes by `pread`/`pwrite`: the kernel then skips importing an iovec array.
        let ret = unsafe {
            match (write, list.iovecs()) {
                (true, [one]) => libc::pwrite(fd, one.iov_base, one.iov_len, offset),
                (false, [one]) => libc::pread(fd, one.iov_base, one.iov_len, offset),
                (true, _) => libc::pwritev(fd, iov, count.cast_signed(), offset),
                (false, _) => libc::preadv(fd, iov, count.cast_signed(), offset),
            }
        };
        Some(if ret < 0 {
            -io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO)
        } else {
            // At most the request's length, which the parser bounds to a u32 of sectors.
            i32::try_from(ret).unwrap_or(-libc::EIO)
        })
    }

    /// The registered file an access through `iov` at `offset` must use.
    fn file_for(&self, offset: u64, iov: IovList) -> types::Fixed {
        let shift = if self.on_base { BASE_SHIFT } else { 0 };
        let mask = self.target().1 - 1;
        let aligned = host_size(offset) & mask == 0
            && iov
                .iovecs()
                .iter()
                .all(|v| (v.iov_base as usize | v.iov_len) & mask == 0);
        types::Fixed(shift + if aligned { DIRECT.0 } else { BUFFERED.0 })
    }

    /// The registered buffer holding a one-segment operation's whole buffer, if any: the
    /// segment (as [`one_segment`]) and the buffer's index.
    fn fixed_buffer(&self, iov: IovList) -> Option<(*mut u8, u32, u16)> {
        let fixed = self.fixed.as_ref()?;
        let [one] = iov.iovecs() else {
            return None;
        };
        let index = fixed.index_of(one.iov_base, one.iov_len)?;
        let (base, len) = one_segment(iov)?;
        Some((base, len, index))
    }

    fn entry(&self, op: IoOp) -> squeue::Entry {
        match op {
            // A buffer in registered guest memory: the kernel pins nothing per request.
            IoOp::Read { offset, iov } if let Some((base, len, index)) = self.fixed_buffer(iov) => {
                opcode::ReadFixed::new(self.file_for(offset, iov), base, len, index)
                    .offset(offset)
                    .build()
            }
            IoOp::Write { offset, iov }
                if let Some((base, len, index)) = self.fixed_buffer(iov) =>
            {
                opcode::WriteFixed::new(self.file_for(offset, iov), base.cast_const(), len, index)
                    .offset(offset)
                    .build()
            }
            // One segment (most requests) skips the kernel's iovec import.
            IoOp::Read { offset, iov } if let Some((base, len)) = one_segment(iov) => {
                opcode::Read::new(self.file_for(offset, iov), base, len)
                    .offset(offset)
                    .build()
            }
            IoOp::Write { offset, iov } if let Some((base, len)) = one_segment(iov) => {
                opcode::Write::new(self.file_for(offset, iov), base.cast_const(), len)
                    .offset(offset)
                    .build()
            }
            IoOp::Read { offset, iov } => {
                opcode::Readv::new(self.file_for(offset, iov), iov.as_ptr(), iov.count())
                    .offset(offset)
                    .build()
            }
            IoOp::Write { offset, iov } => {
                opcode::Writev::new(self.file_for(offset, iov), iov.as_ptr(), iov.count())
                    .offset(offset)
                    .build()
            }
            IoOp::Flush => opcode::Fsync::new(DIRECT)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            IoOp::Discard { offset, len } => match self.kind {
                // Storage that cannot discard never gets here (see `immediate`).
                FileKind::Regular { .. } => opcode::Fallocate::new(DIRECT, len)
                    .offset(offset)
                    .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                    .build(),
                // BLKDISCARD through the ring: start in `addr`, length in `addr3` (the first
                // eight bytes of the command area).
                FileKind::BlockDevice { .. } => {
                    let mut cmd = [0u8; 16];
                    cmd[..8].copy_from_slice(&len.to_ne_bytes());
                    opcode::UringCmd16::new(DIRECT, BLOCK_URING_CMD_DISCARD)
                        .addr(Some(offset))
                        .cmd(cmd)
                        .build()
                }
            },
            IoOp::WriteZeroes { offset, len, unmap } => {
                let mode = match self.kind {
                    FileKind::Regular {
                        zero_range,
                        punch_hole,
                        ..
                    } => {
                        if punch_hole && (unmap || !zero_range) {
                            libc::FALLOC_FL_PUNCH_HOLE
                        } else {
                            libc::FALLOC_FL_ZERO_RANGE
                        }
                    }
                    // The block layer zeroes in software where the device cannot; punching
                    // would need hardware write-zeroes and fail without it.
                    FileKind::BlockDevice { .. } => libc::FALLOC_FL_ZERO_RANGE,
                };
                opcode::Fallocate::new(DIRECT, len)
                    .offset(offset)
                    .mode(mode | libc::FALLOC_FL_KEEP_SIZE)
                    .build()
            }
        }
    }
}

impl Engine for UringEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        if let Some(result) = self.immediate(op) {
            self.inline_done.push((tag, result));
            return Ok(());
        }
        let entry = self.entry(op).user_data(tag);
        // SAFETY: the buffers the entry points to (iovecs and guest memory) stay valid until its
        // completion is reaped: the worker keeps the request's slot and its guest memory
        // snapshot until then.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            // The submission queue is full: hand it to the kernel and try once more.
            self.submit()?;
            // SAFETY: as for the first push.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| io::Error::from(io::ErrorKind::WouldBlock))?;
        }
        self.queued += 1;
        self.in_ring += 1;
        // From here the operation is in flight whatever `submit` says: it completes only with
        // its CQE. A failed submit leaves the entry queued for the worker's next submit.
        if !self.batch
            && let Err(e) = self.submit()
        {
            crate::limited!(
                debug,
                "submit after a queued operation: {e}; retried at the next submit"
            );
        }
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        // With nothing to submit, enter only to flush completions that overflowed the CQ
        // (`submit` then asks the kernel for them with GETEVENTS).
        if self.queued == 0 && !self.ring.submission().cq_overflow() {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // Completions are backed up: let the caller reap, the entries stay queued.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.queued = u32::try_from(self.ring.submission().len()).unwrap_or(u32::MAX);
        Ok(())
    }

    fn wait(&mut self) -> io::Result<()> {
        if !self.inline_done.is_empty() {
            return Ok(());
        }
        match self.ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
        self.queued = u32::try_from(self.ring.submission().len()).unwrap_or(u32::MAX);
        Ok(())
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for (tag, result) in self.inline_done.drain(..) {
            done(tag, result);
        }
        for cqe in self.ring.completion() {
            self.in_ring = self.in_ring.saturating_sub(1);
            done(cqe.user_data(), cqe.result());
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.notifier.as_ref().map(|fd| fd.as_raw_fd())
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        let Some(fixed) = self.fixed.as_mut() else {
            return Ok(());
        };
        // SAFETY: the caller keeps the regions mapped until it calls this again or drops the
        // engine.
        unsafe { fixed.replace(&self.ring, regions) }
    }
}

/// A queue's own ring, or one lent by the pool.
enum Ring {
    Own(IoUring),
    Pooled(PooledRing),
}

impl std::ops::Deref for Ring {
    type Target = IoUring;
    fn deref(&self) -> &IoUring {
        match self {
            Ring::Own(ring) => ring,
            Ring::Pooled(ring) => ring,
        }
    }
}

impl std::ops::DerefMut for Ring {
    fn deref_mut(&mut self) -> &mut IoUring {
        match self {
            Ring::Own(ring) => ring,
            Ring::Pooled(ring) => ring,
        }
    }
}

impl Drop for UringEngine {
    fn drop(&mut self) {
        // A pooled ring goes back only with every completion reaped (see `ring_pool`).
        if self.in_ring == 0
            && let Ring::Pooled(ring) = &mut self.ring
        {
            ring.drained();
        }
    }
}

/// The one segment of a one-segment operation, as a ring entry takes it.
fn one_segment(iov: IovList) -> Option<(*mut u8, u32)> {
    match iov.iovecs() {
        [one] => Some((
            one.iov_base.cast(),
            u32::try_from(one.iov_len).unwrap_or(u32::MAX),
        )),
        _ => None,
    }
}
