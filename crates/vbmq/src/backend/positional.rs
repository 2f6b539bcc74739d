//! A file engine without a ring: each operation done on the queue's thread with positional
//! system calls (`preadv`/`pwritev`, `fdatasync`, `fallocate`). For file disks added to a
//! confined vbmq at run time, which cannot create an io_uring ring (`io_uring_setup` is refused
//! after start): correct, one operation at a time per queue.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use super::IoOp;
use super::immediate::Execute;
use super::uring::FileKind;

/// Positional I/O on one image: `direct` for aligned accesses, `buffered` for the others.
pub struct PositionalIo {
    /// The `O_DIRECT` descriptor (the buffered one again when `direct=off`).
    pub direct: OwnedFd,
    /// The buffered descriptor.
    pub buffered: OwnedFd,
    /// What `O_DIRECT` needs aligned.
    pub align: usize,
    /// What the storage can do.
    pub kind: FileKind,
}

fn errno() -> i32 {
    -io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn result(ret: isize) -> i32 {
    if ret < 0 {
        errno()
    } else {
        // At most the request's length, which the parser bounds to a u32 of sectors.
        i32::try_from(ret).unwrap_or(-libc::EIO)
    }
}

impl PositionalIo {
    fn fd_for(&self, offset: u64, iov: super::IovList) -> i32 {
        let mask = self.align.saturating_sub(1);
        let aligned = usize::try_from(offset).is_ok_and(|o| o & mask == 0)
            && iov
                .iovecs()
                .iter()
                .all(|v| (v.iov_base as usize | v.iov_len) & mask == 0);
        if aligned {
            self.direct.as_raw_fd()
        } else {
            self.buffered.as_raw_fd()
        }
    }

    fn fallocate(&self, mode: libc::c_int, offset: u64, len: u64) -> i32 {
        let (Ok(at), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return -libc::EINVAL;
        };
        // SAFETY: fallocate on an open descriptor; no memory is passed.
        let ret = unsafe {
            libc::fallocate(
                self.buffered.as_raw_fd(),
                mode | libc::FALLOC_FL_KEEP_SIZE,
                at,
                len,
            )
        };
        if ret == 0 { 0 } else { errno() }
    }

    /// Zeroes a range with writes of a zero buffer.
    fn write_zeroes_by_hand(&self, mut offset: u64, len: u64) -> i32 {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let end = offset.saturating_add(len);
        while offset < end {
            let n = usize::try_from(end - offset).map_or(ZEROS.len(), |n| n.min(ZEROS.len()));
            let Ok(at) = libc::off_t::try_from(offset) else {
                return -libc::EINVAL;
            };
            // SAFETY: writes `n <= ZEROS.len()` bytes from a static buffer.
            let ret =
                unsafe { libc::pwrite(self.buffered.as_raw_fd(), ZEROS.as_ptr().cast(), n, at) };
            match ret {
                r if r > 0 => offset += r.unsigned_abs() as u64,
                0 => return -libc::EIO,
                _ if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
                _ => return errno(),
            }
        }
        0
    }
}

impl Execute for PositionalIo {
    fn execute(&mut self, op: IoOp) -> i32 {
        match op {
            IoOp::Read { offset, iov } | IoOp::Write { offset, iov } => {
                let write = matches!(op, IoOp::Write { .. });
                let fd = self.fd_for(offset, iov);
                let Ok(at) = libc::off_t::try_from(offset) else {
                    return -libc::EINVAL;
                };
                let Ok(count) = libc::c_int::try_from(iov.count()) else {
                    return -libc::EINVAL;
                };
                // SAFETY: the worker guarantees `iov` points to `count` iovecs over mapped guest
                // memory (device-writable for reads), valid for the duration of the call.
                let ret = unsafe {
                    if write {
                        libc::pwritev(fd, iov.as_ptr(), count, at)
                    } else {
                        libc::preadv(fd, iov.as_ptr(), count, at)
                    }
                };
                result(ret)
            }
            IoOp::Flush => {
                // SAFETY: fdatasync on an open descriptor.
                if unsafe { libc::fdatasync(self.direct.as_raw_fd()) } == 0 {
                    0
                } else {
                    errno()
                }
            }
            IoOp::Discard { offset, len } => match self.kind {
                FileKind::Regular {
                    punch_hole: true, ..
                } => self.fallocate(libc::FALLOC_FL_PUNCH_HOLE, offset, len),
                // Advisory: storage that cannot discard (and block devices, whose discard
                // ioctl the filter refuses) succeeds without doing anything.
                FileKind::Regular { .. } | FileKind::BlockDevice { .. } => 0,
            },
            IoOp::WriteZeroes { offset, len, unmap } => match self.kind {
                FileKind::Regular {
                    punch_hole,
                    zero_range,
                    ..
                } if punch_hole && (unmap || !zero_range) => {
                    self.fallocate(libc::FALLOC_FL_PUNCH_HOLE, offset, len)
                }
                FileKind::Regular {
                    zero_range: true, ..
                }
                | FileKind::BlockDevice { .. } => {
                    self.fallocate(libc::FALLOC_FL_ZERO_RANGE, offset, len)
                }
                FileKind::Regular { .. } => self.write_zeroes_by_hand(offset, len),
            },
        }
    }
}
