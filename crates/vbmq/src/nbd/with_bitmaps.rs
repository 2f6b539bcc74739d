//! An export with the dirty bitmaps frozen at its instant: the export's data and allocation,
//! and a `qemu:dirty-bitmap:NAME` context per bitmap.

use std::sync::Arc;

use super::meta_context::DirtyBitmap;
use super::server::Export;

/// `inner`, offering `bitmaps` too.
pub struct WithBitmaps {
    inner: Arc<dyn Export>,
    bitmaps: Vec<DirtyBitmap>,
}

impl WithBitmaps {
    /// `inner` with `bitmaps` (names unique).
    pub fn new(inner: Arc<dyn Export>, bitmaps: Vec<DirtyBitmap>) -> Self {
        WithBitmaps { inner, bitmaps }
    }
}

impl Export for WithBitmaps {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), u32> {
        self.inner.read(offset, buf)
    }
    fn trim(&self, offset: u64, len: u64) -> Result<(), u32> {
        self.inner.trim(offset, len)
    }
    fn allocation(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u32, u32)>, u32> {
        self.inner.allocation(offset, len, max)
    }
    fn dirty_bitmaps(&self) -> &[DirtyBitmap] {
        &self.bitmaps
    }
}
