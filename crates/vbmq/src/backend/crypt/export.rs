//! An export of an encrypted disk serves what the guest sees: the export below (fleeced at
//! the storage, so ciphertext) is read by whole sectors and decrypted on the client's thread.
//! Allocation tells nothing: a hole of the image is not zeros to the guest (it decrypts to
//! noise), and telling holes apart would show which ranges were never written.

use std::sync::Arc;

use super::key_page::KeyPage;
use super::sector::SECTOR;
use crate::nbd::wire::errno;
use crate::nbd::{DirtyBitmap, Export};

/// The plaintext view of an export of ciphertext.
pub struct Decrypted {
    inner: Arc<dyn Export>,
    xts: Arc<KeyPage>,
}

impl Decrypted {
    /// `inner`'s plaintext, with the disk's cipher.
    pub(super) fn new(inner: Arc<dyn Export>, xts: Arc<KeyPage>) -> Self {
        Decrypted { inner, xts }
    }
}

impl Export for Decrypted {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), u32> {
        let sector = SECTOR as u64;
        let first = offset / sector;
        let start = first * sector;
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or(errno::EINVAL)?
            .next_multiple_of(sector)
            .min(self.size());
        let whole = offset == start && end == offset + buf.len() as u64;
        if whole {
            self.inner.read(offset, buf)?;
            self.xts.decrypt(buf, first);
            return Ok(());
        }
        // A range that cuts sectors: the sectors around it, decrypted, then its part.
        let len = usize::try_from(end - start).map_err(|_| errno::EINVAL)?;
        let mut sectors = Vec::new();
        sectors.try_reserve_exact(len).map_err(|_| errno::EIO)?;
        sectors.resize(len, 0);
        self.inner.read(start, &mut sectors)?;
        self.xts.decrypt(&mut sectors, first);
        let at = usize::try_from(offset - start).map_err(|_| errno::EINVAL)?;
        let part = sectors.get(at..at + buf.len()).ok_or(errno::EINVAL)?;
        buf.copy_from_slice(part);
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), u32> {
        self.inner.trim(offset, len)
    }

    fn allocation(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u32, u32)>, u32> {
        let _ = (offset, max);
        let end = offset.saturating_add(len).min(self.size());
        // A request's length is a u32: so is what is left of it.
        let length = u32::try_from(end.saturating_sub(offset)).unwrap_or(u32::MAX);
        Ok(vec![(length, 0)])
    }

    fn dirty_bitmaps(&self) -> &[DirtyBitmap] {
        self.inner.dirty_bitmaps()
    }
}
