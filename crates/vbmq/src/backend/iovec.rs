//! Copies between guest iovecs and host buffers, for the engines that serve requests with
//! `memcpy` (the `mem=` disks and cache hits).

/// The iovecs of one operation, as handed to [`super::Engine::push`].
#[derive(Clone, Copy, Debug)]
pub struct IovList {
    iov: *const libc::iovec,
    count: u32,
}

impl IovList {
    /// # Safety
    ///
    /// `iov` points to `count` initialised iovecs, each a mapped buffer of `iov_len` bytes, valid
    /// until the operation is reaped (the contract of [`super::Engine::push`]).
    pub unsafe fn new(iov: *const libc::iovec, count: u32) -> Self {
        IovList { iov, count }
    }

    /// The iovecs, as given.
    pub fn as_ptr(&self) -> *const libc::iovec {
        self.iov
    }

    /// Number of iovecs.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The iovecs.
    pub fn iovecs(&self) -> &[libc::iovec] {
        if self.count == 0 {
            return &[];
        }
        // SAFETY: guaranteed by the caller of `new`.
        unsafe { std::slice::from_raw_parts(self.iov, self.count as usize) }
    }

    /// Whether the list has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.iovecs().iter().map(|v| v.iov_len).sum()
    }

    /// The iovecs of bytes `[at, at + len)`: pieces of the same buffers.
    pub fn slice(&self, at: usize, len: usize) -> Vec<libc::iovec> {
        let mut out = Vec::new();
        self.pieces(at, len, |base, n| {
            out.push(libc::iovec {
                iov_base: base.cast(),
                iov_len: n,
            })
        });
        out
    }

    /// Calls `f(pointer, len)` for each piece of the list's bytes `[at, at + len)`, in order.
    fn pieces(&self, mut at: usize, mut len: usize, mut f: impl FnMut(*mut u8, usize)) {
        for v in self.iovecs() {
            if len == 0 {
                return;
            }
            if at >= v.iov_len {
                at -= v.iov_len;
                continue;
            }
            let n = (v.iov_len - at).min(len);
            // SAFETY: `at < iov_len`, so the pointer stays inside this iovec's buffer.
            f(unsafe { v.iov_base.cast::<u8>().add(at) }, n);
            at = 0;
            len -= n;
        }
    }

    /// Copies `src` into the list's bytes starting at `at`; bytes past the end are dropped.
    ///
    /// # Safety
    ///
    /// `src` is valid for reads of `len` bytes and does not overlap the iovecs' buffers.
    pub unsafe fn copy_in(&self, at: usize, src: *const u8, len: usize) {
        let mut done = 0;
        self.pieces(at, len, |dst, n| {
            // SAFETY: `dst` has `n` bytes (see `pieces`); `src` has `len >= done + n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst, n) };
            done += n;
        });
    }

    /// Copies the list's bytes starting at `at` to `dst`; returns the bytes copied.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `len` bytes and does not overlap the iovecs' buffers.
    pub unsafe fn copy_out(&self, at: usize, dst: *mut u8, len: usize) -> usize {
        let mut done = 0;
        self.pieces(at, len, |src, n| {
            // SAFETY: `src` has `n` bytes (see `pieces`); `dst` has `len >= done + n` bytes.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.add(done), n) };
            done += n;
        });
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iov(buf: &mut [u8]) -> libc::iovec {
        libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }
    }

    #[test]
    fn copies_across_iovec_boundaries() {
        let (mut a, mut b, mut c) = (vec![0u8; 3], vec![0u8; 5], vec![0u8; 4]);
        let iovs = [iov(&mut a), iov(&mut b), iov(&mut c)];
        // SAFETY: the iovecs point to live vectors for the whole test.
        let list = unsafe { IovList::new(iovs.as_ptr(), 3) };
        assert_eq!(list.len(), 12);
        let src: Vec<u8> = (1..=8).collect();
        // SAFETY: `src` has 8 bytes and is separate from the iovecs.
        unsafe { list.copy_in(2, src.as_ptr(), 8) };
        let mut back = vec![0u8; 12];
        // SAFETY: `back` has 12 bytes.
        assert_eq!(unsafe { list.copy_out(0, back.as_mut_ptr(), 12) }, 12);
        assert_eq!(back, [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0]);
        // Past the end: nothing is written and the count says so.
        // SAFETY: `back` has 12 bytes.
        assert_eq!(unsafe { list.copy_out(10, back.as_mut_ptr(), 12) }, 2);
    }
}
