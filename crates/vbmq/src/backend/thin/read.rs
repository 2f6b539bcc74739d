//! Reads of a thin disk on the caller's thread, by the map: blocks DISK holds from DISK, the
//! others from BASE. For a snapshot's copies (see `crate::backend::snapshot`), never the guest's
//! requests, which go through the queues' rings.

use std::fs::File;
use std::io;
use std::sync::Arc;

use super::base::{BaseReader, read_or_zeros};
use super::map::ThinMap;
use crate::host_size;

/// A thin disk read with positional system calls.
pub struct ThinReader {
    map: Arc<ThinMap>,
    data: File,
    base: BaseReader,
}

impl ThinReader {
    pub(super) fn new(map: Arc<ThinMap>, data: File, base: BaseReader) -> Self {
        ThinReader { map, data, base }
    }

    /// Bytes per block of the map.
    pub fn block_size(&self) -> u64 {
        self.map.block_size()
    }

    /// DISK and BASE (an NBD base has no file).
    pub fn files(&self) -> Vec<&File> {
        std::iter::once(&self.data)
            .chain(self.base.file())
            .collect()
    }

    /// The file the disk's byte at `offset` is read from (DISK where its block is present, BASE
    /// elsewhere; none for an NBD base), and the bytes from `offset` to the end of its block.
    pub fn file_at(&self, offset: u64) -> (Option<&File>, u64) {
        let bs = self.map.block_size();
        let block = offset / bs;
        let file = if self.map.is_present(block) {
            Some(&self.data)
        } else {
            self.base.file()
        };
        (file, (block + 1) * bs - offset)
    }

    /// Fills `buf` with the disk's bytes at `offset`. A block being copied into DISK reads from
    /// BASE until its map bit is set, which is what the disk holds until then.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bs = self.map.block_size();
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let block = at / bs;
            let n = host_size((block + 1) * bs - at).min(buf.len() - done);
            let buf = &mut buf[done..done + n];
            if self.map.is_present(block) {
                read_or_zeros(&self.data, buf, at)?;
            } else {
                self.base.read_at(buf, at)?;
            }
            done += n;
        }
        Ok(())
    }
}
