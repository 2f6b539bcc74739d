//! Reads of a thin disk on the caller's thread, by the map: blocks DISK holds from DISK, the
//! others from BASE. For a snapshot's copies (see `crate::backend::snapshot`), never the guest's
//! requests, which go through the queues' rings.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::map::ThinMap;
use crate::host_size;

/// A thin disk read with positional system calls.
pub struct ThinReader {
    map: Arc<ThinMap>,
    data: File,
    base: File,
}

/// Fills `buf` from `file` at `offset`; what lies past the file's end reads as zeros (a sparse
/// DISK may be shorter than its blocks).
pub fn read_or_zeros(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl ThinReader {
    pub(super) fn new(map: Arc<ThinMap>, data: File, base: File) -> Self {
        ThinReader { map, data, base }
    }

    /// Bytes per block of the map.
    pub fn block_size(&self) -> u64 {
        self.map.block_size()
    }

    /// DISK and BASE.
    pub fn files(&self) -> [&File; 2] {
        [&self.data, &self.base]
    }

    /// The file the disk's byte at `offset` is read from (DISK where its block is present, BASE
    /// elsewhere), and the bytes from `offset` to the end of its block.
    pub fn file_at(&self, offset: u64) -> (&File, u64) {
        let bs = self.map.block_size();
        let block = offset / bs;
        let file = if self.map.is_present(block) {
            &self.data
        } else {
            &self.base
        };
        (file, (block + 1) * bs - offset)
    }

    /// Fills `buf` with the disk's bytes at `offset`. A block being copied into DISK reads from
    /// BASE until its map bit is set, which is what the disk holds until then.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (file, left) = self.file_at(at);
            let n = host_size(left).min(buf.len() - done);
            read_or_zeros(file, &mut buf[done..done + n], at)?;
            done += n;
        }
        Ok(())
    }
}
