//! Aligned buffers that engines read into and write from on the guest's behalf.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;

use super::iovec::IovList;

/// A 4096-aligned buffer (fit for `O_DIRECT`), with the iovec that describes it (boxed: the
/// kernel keeps a pointer to it until the operation is reaped).
pub struct Staging {
    ptr: NonNull<u8>,
    layout: Layout,
    iov: Box<libc::iovec>,
}

// SAFETY: the buffer is owned, like a `Vec<u8>`.
unsafe impl Send for Staging {}

impl Staging {
    /// A zeroed buffer of at least `len` bytes; `None` if memory is short.
    pub fn new(len: usize) -> Option<Self> {
        Self::aligned(len, 4096)
    }

    /// A zeroed buffer of at least `len` bytes aligned to `align` (a power of two, at least
    /// 4096); `None` if memory is short.
    pub fn aligned(len: usize, align: usize) -> Option<Self> {
        let align = align.max(4096);
        let layout = Layout::from_size_align(len.max(align), align).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        let iov = Box::new(libc::iovec {
            iov_base: ptr.as_ptr().cast(),
            iov_len: layout.size(),
        });
        Some(Staging { ptr, layout, iov })
    }

    /// Bytes it holds.
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// The start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The first `len` bytes.
    pub fn bytes(&mut self, len: usize) -> &mut [u8] {
        let len = len.min(self.layout.size());
        // SAFETY: the buffer holds `layout.size() >= len` initialised (zeroed) bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), len) }
    }

    /// The iovec list of the first `len` bytes, for an engine.
    pub fn list(&mut self, len: usize) -> IovList {
        self.iov.iov_len = len.min(self.layout.size());
        // SAFETY: one iovec over this buffer, both kept by the caller until the operation is
        // reaped.
        unsafe { IovList::new(&*self.iov, 1) }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
