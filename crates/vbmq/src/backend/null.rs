//! The null device: reads return zeros, writes are dropped. It measures the virtualization path
//! alone, like the kernel's null_blk that the VBMq paper uses.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use super::immediate::{Execute, Immediate};
use super::{Disk, Engine, EngineOptions, Geometry, IoOp, IovList};

/// A disk of `capacity` bytes that stores nothing.
pub struct NullDisk {
    capacity: AtomicU64,
}

impl NullDisk {
    /// A null disk of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        NullDisk {
            capacity: AtomicU64::new(capacity),
        }
    }
}

impl Disk for NullDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.capacity.load(Ordering::Relaxed),
            block_size: 512,
            physical_block_exp: 0,
        }
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(Immediate::new(NullEngine, options.depth)))
    }

    fn supports_discard(&self) -> bool {
        true
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        super::check_resize(self.capacity.load(Ordering::Relaxed), bytes, 512, shrink)?;
        self.capacity.store(bytes, Ordering::Relaxed);
        Ok(bytes)
    }
}

/// Completes every operation at once.
struct NullEngine;

fn iov_bytes(iov: IovList) -> i32 {
    i32::try_from(iov.len()).unwrap_or(i32::MAX)
}

impl Execute for NullEngine {
    fn execute(&mut self, op: IoOp) -> i32 {
        match op {
            IoOp::Read { iov, .. } => {
                for v in iov.iovecs() {
                    // SAFETY: the buffer is mapped guest memory of `iov_len` bytes.
                    unsafe { std::ptr::write_bytes(v.iov_base.cast::<u8>(), 0, v.iov_len) };
                }
                iov_bytes(iov)
            }
            IoOp::Write { iov, .. } => iov_bytes(iov),
            IoOp::Flush | IoOp::Discard { .. } | IoOp::WriteZeroes { .. } => 0,
        }
    }
}
