//! Anonymous host memory for the `mem=` disks and the DRAM cache: huge pages when the host has
//! them, normal pages otherwise. Pages are only backed once touched.

use std::io;
use std::ptr::NonNull;

/// The huge page size this code asks for (x86-64 and arm64 default).
const HUGE_PAGE: usize = 2 << 20;

/// What backs a [`HostMemory`] region, for the log and for zeroing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageKind {
    /// Reserved huge pages (`MAP_HUGETLB`).
    HugeTlb,
    /// Normal pages that the kernel may merge into transparent huge pages.
    Transparent,
    /// Normal pages.
    Normal,
}

/// One private anonymous mapping, unmapped on drop.
#[derive(Debug)]
pub struct HostMemory {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the mapping is plain memory owned by this value; callers synchronise access to its
// bytes (the cache under its shard locks, a `mem=` disk like a disk: racing requests race).
unsafe impl Send for HostMemory {}
// SAFETY: as for `Send`; `&HostMemory` only hands out the base pointer.
unsafe impl Sync for HostMemory {}

/// Maps `len` bytes with `flags` besides private and anonymous.
fn map(len: usize, flags: libc::c_int) -> Option<NonNull<u8>> {
    // SAFETY: a new private anonymous mapping; no existing memory is affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    NonNull::new(ptr.cast())
}

impl HostMemory {
    /// Maps `len` bytes of zeroed memory (`len` > 0).
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty region"));
        }
        // Without MAP_NORESERVE the huge pages are reserved now, so a later fault cannot fail
        // (with it, a host short of huge pages would SIGBUS on first touch).
        if len.is_multiple_of(HUGE_PAGE)
            && let Some(ptr) = map(len, libc::MAP_HUGETLB)
        {
            return Ok(HostMemory {
                ptr,
                len,
                kind: PageKind::HugeTlb,
            });
        }
        let ptr = map(len, libc::MAP_NORESERVE).ok_or_else(io::Error::last_os_error)?;
        // SAFETY: advice on the mapping just created; it changes no contents.
        let advised = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        let kind = if advised == 0 {
            PageKind::Transparent
        } else {
            PageKind::Normal
        };
        Ok(HostMemory { ptr, len, kind })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn kind(&self) -> PageKind {
        self.kind
    }

    /// Zeroes `len` bytes at `offset`, giving whole pages back to the host.
    ///
    /// Racing accesses to the same range see old bytes or zeros, as a disk would.
    pub fn zero(&self, offset: usize, len: usize) {
        let end = offset.saturating_add(len).min(self.len);
        if offset >= end {
            return;
        }
        let page = match self.kind {
            PageKind::HugeTlb => HUGE_PAGE,
            // SAFETY: sysconf has no memory effects.
            PageKind::Transparent | PageKind::Normal => unsafe {
                usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096)
            },
        };
        let first = offset.next_multiple_of(page);
        let last = end - end % page;
        if first >= last {
            self.fill_zero(offset, end);
            return;
        }
        // SAFETY: [first, last) is a page-aligned range inside the private anonymous mapping;
        // after MADV_DONTNEED it reads back as zeros.
        let ret = unsafe {
            libc::madvise(
                self.as_ptr().add(first).cast(),
                last - first,
                libc::MADV_DONTNEED,
            )
        };
        if ret == 0 {
            self.fill_zero(offset, first);
            self.fill_zero(last, end);
        } else {
            self.fill_zero(offset, end);
        }
    }

    fn fill_zero(&self, start: usize, end: usize) {
        if start < end {
            // SAFETY: start < end <= len: inside the mapping.
            unsafe { std::ptr::write_bytes(self.as_ptr().add(start), 0, end - start) };
        }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; nothing points into it any more.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_keeps_the_bytes_around_the_range() {
        let mem = HostMemory::new(3 << 20).unwrap();
        // SAFETY: the test owns the whole mapping.
        let bytes = unsafe { std::slice::from_raw_parts_mut(mem.as_ptr(), mem.len()) };
        bytes.fill(0xa5);
        mem.zero(100, (2 << 20) + 8000);
        // SAFETY: as above; the mutable borrow has ended.
        let bytes = unsafe { std::slice::from_raw_parts(mem.as_ptr(), mem.len()) };
        assert!(bytes[..100].iter().all(|b| *b == 0xa5));
        assert!(bytes[100..100 + (2 << 20) + 8000].iter().all(|b| *b == 0));
        assert!(bytes[100 + (2 << 20) + 8000..].iter().all(|b| *b == 0xa5));
    }

    #[test]
    fn empty_is_refused() {
        assert!(HostMemory::new(0).is_err());
    }
}
