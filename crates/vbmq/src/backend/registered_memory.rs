//! Guest memory registered with a queue's io_uring as fixed buffers (`fixed-buffers=on`): the
//! kernel pins the pages once, instead of looking up and pinning each request's pages for every
//! `O_DIRECT` read and write.

use std::io;

use io_uring::IoUring;

/// `IORING_REGISTER_BUFFERS` and `IORING_UNREGISTER_BUFFERS` from <linux/io_uring.h>, for the
/// ring's restrictions.
pub const REGISTER_OPS: &[u8] = &[0, 1];

/// The kernel's limit on one registered buffer.
const MAX_BUFFER: usize = 1 << 30;

/// The buffers registered with one ring: host address and length of each, in the ring's order.
#[derive(Debug, Default)]
pub struct RegisteredMemory {
    buffers: Vec<(usize, usize)>,
}

impl RegisteredMemory {
    /// Replaces what `ring` has registered with `regions` (the guest's memory, as host
    /// mappings), each cut into buffers the kernel accepts. On error nothing is registered.
    ///
    /// # Safety
    ///
    /// The regions stay mapped until they are replaced here or the ring is dropped: the kernel
    /// reads and writes them for fixed-buffer operations.
    pub unsafe fn replace(&mut self, ring: &IoUring, regions: &[libc::iovec]) -> io::Result<()> {
        if !self.buffers.is_empty() {
            self.buffers.clear();
            ring.submitter().unregister_buffers()?;
        }
        let mut iovecs = Vec::new();
        for region in regions {
            let (mut base, mut left) = (region.iov_base as usize, region.iov_len);
            while left > 0 {
                let len = left.min(MAX_BUFFER);
                iovecs.push(libc::iovec {
                    iov_base: base as *mut libc::c_void,
                    iov_len: len,
                });
                base += len;
                left -= len;
            }
        }
        if iovecs.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller keeps the regions mapped while they are registered.
        unsafe { ring.submitter().register_buffers(&iovecs) }?;
        self.buffers = iovecs
            .iter()
            .map(|v| (v.iov_base as usize, v.iov_len))
            .collect();
        Ok(())
    }

    /// The index of the registered buffer holding all of `[addr, addr + len)`.
    pub fn index_of(&self, addr: *const libc::c_void, len: usize) -> Option<u16> {
        let addr = addr as usize;
        let end = addr.checked_add(len)?;
        let index = self
            .buffers
            .iter()
            .position(|&(base, size)| addr >= base && end <= base + size)?;
        u16::try_from(index).ok()
    }
}
