//! Whole-disk reads through a libblkio [`Client`], for tests that compare a disk with what it
//! should hold.

use super::{BUF_LEN, Client};

impl Client {
    /// Reads `len` bytes from the start on queue 0, in chunks of [`BUF_LEN`]; every read must
    /// succeed.
    pub fn read_all(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let n = (len - out.len()).min(BUF_LEN);
            let (ret, data) = self.read(0, out.len() as u64, n);
            assert_eq!(ret, 0, "read at {}", out.len());
            out.extend_from_slice(&data);
        }
        out
    }

    /// Reads the whole disk (its capacity) from the start.
    pub fn read_capacity(&mut self) -> Vec<u8> {
        let len = usize::try_from(self.capacity()).expect("a capacity that fits in memory");
        self.read_all(len)
    }

    /// Reads `expected.len()` bytes at `offset` on queue `q`: the read must succeed and return
    /// `expected` (`what` names the case).
    pub fn assert_reads(&mut self, q: usize, offset: u64, expected: &[u8], what: &str) {
        let (ret, data) = self.read(q, offset, expected.len());
        assert_eq!(ret, 0, "{what}: read at {offset}");
        assert!(data == expected, "{what}");
    }

    /// Reads the first `expected.len()` bytes as [`Self::read_all`] does: they must be
    /// `expected` (`what` names the case).
    pub fn assert_all(&mut self, expected: &[u8], what: &str) {
        assert!(self.read_all(expected.len()) == expected, "{what}");
    }
}
