//! `mem=SIZE` disks: the blocks live in host memory and each request is one `memcpy` on the
//! queue's own thread, with no system call. The contents are volatile: they are lost when vbmq
//! exits, and flush has nothing to make durable.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use tracing::info;

use super::host_memory::HostMemory;
use super::immediate::{Execute, Immediate};
use super::{Disk, Engine, EngineOptions, Geometry, IoOp};
use crate::host_size;

/// A disk held in host memory, shared by its queues.
pub struct MemoryDisk {
    memory: Arc<HostMemory>,
    capacity: u64,
}

impl MemoryDisk {
    /// A zeroed disk of `capacity` bytes (a positive multiple of 512).
    pub fn new(capacity: u64) -> io::Result<Self> {
        if capacity == 0 || !capacity.is_multiple_of(512) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "capacity must be a positive multiple of 512",
            ));
        }
        let len = usize::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "capacity too large"))?;
        let memory = HostMemory::new(len)?;
        info!("mem disk of {capacity} bytes on {:?} pages", memory.kind());
        Ok(MemoryDisk {
            memory: Arc::new(memory),
            capacity,
        })
    }

    /// A disk of `capacity` bytes that starts with the contents of the raw image at `image`
    /// (which must not be larger); the rest reads as zeros.
    pub fn load(capacity: u64, image: &Path) -> io::Result<Self> {
        let disk = Self::new(capacity)?;
        let file = File::open(image)?;
        let len = file.metadata()?.len();
        if len > capacity {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the image has {len} bytes, more than the disk's {capacity}"),
            ));
        }
        // SAFETY: the region has `capacity >= len` bytes and no engine exists yet to race with.
        let bytes = unsafe { std::slice::from_raw_parts_mut(disk.memory.as_ptr(), host_size(len)) };
        file.read_exact_at(bytes, 0)?;
        Ok(disk)
    }
}

impl Disk for MemoryDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.capacity,
            block_size: 512,
            physical_block_exp: 0,
        }
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        let engine = MemoryEngine {
            memory: self.memory.clone(),
        };
        Ok(Box::new(Immediate::new(engine, options.depth)))
    }

    fn supports_discard(&self) -> bool {
        true
    }
}

/// Serves a queue by copying at push time.
struct MemoryEngine {
    memory: Arc<HostMemory>,
}

impl MemoryEngine {
    /// The byte offset of `[offset, offset + len)` in the region, or `None` if it is outside.
    fn span(&self, offset: u64, len: usize) -> Option<usize> {
        let start = usize::try_from(offset).ok()?;
        (start.checked_add(len)? <= self.memory.len()).then_some(start)
    }

    fn run(&self, op: IoOp) -> i32 {
        match op {
            IoOp::Read { offset, iov: list } | IoOp::Write { offset, iov: list } => {
                let len = list.len();
                let (Some(start), Ok(result)) = (self.span(offset, len), i32::try_from(len)) else {
                    return -libc::EIO;
                };
                // SAFETY: `span` checked that `[start, start + len)` is inside the region, which
                // guest buffers never overlap (it is vbmq's own mapping). Requests racing on the
                // same blocks may see each other's bytes torn, as on any disk.
                let base = unsafe { self.memory.as_ptr().add(start) };
                if matches!(op, IoOp::Read { .. }) {
                    // SAFETY: as above: `base` has `len` readable bytes.
                    unsafe { list.copy_in(0, base, len) };
                } else {
                    // SAFETY: as above: `base` has `len` writable bytes.
                    unsafe { list.copy_out(0, base, len) };
                }
                result
            }
            IoOp::Flush => 0,
            IoOp::Discard { offset, len } | IoOp::WriteZeroes { offset, len, .. } => {
                let span = usize::try_from(len)
                    .ok()
                    .and_then(|len| Some((self.span(offset, len)?, len)));
                match span {
                    Some((start, len)) => {
                        self.memory.zero(start, len);
                        0
                    }
                    None => -libc::EIO,
                }
            }
        }
    }
}

impl Execute for MemoryEngine {
    fn execute(&mut self, op: IoOp) -> i32 {
        self.run(op)
    }
}
