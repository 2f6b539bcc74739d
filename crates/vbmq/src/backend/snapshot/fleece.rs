//! A point-in-time export by fleecing (`vbmq ctl export-begin`): nothing is copied ahead.
//! A guest write to a block the export still needs first saves the block's old contents to a
//! scratch file, at the block's own offset; the export reads saved blocks from the scratch and
//! the others from the disk itself. A block the client trims is released: no write saves it
//! again, and a read of it is refused (Proxmox's fleecing contract: the backup tool discards
//! what it has read).
//!
//! Three bits a block: `settled` (saved or released: the only test a guest write makes once
//! it is set), `released`, and `claimed` (one thread saves it, or reads it from the disk for
//! the export, at a time; the other waits for that one block). A read of the disk for the
//! export holds the claim, so no guest write changes the block under it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::claims::{Claimed, bit, claim_unsettled, let_go, set_run};
use super::session::{CopyFirst, Source, is_hole};
use crate::host_size;
use crate::nbd::wire::{allocation, errno};

/// A running export's view of the disk at its instant.
pub struct Fleece {
    source: Arc<Source>,
    scratch: File,
    block: u64,
    capacity: u64,
    settled: Vec<AtomicU64>,
    released: Vec<AtomicU64>,
    claimed: Vec<AtomicU64>,
    /// Blocks a guest write saved.
    saved: AtomicU64,
    /// A save failed (the scratch is full, say): the view is no longer whole, every read of the
    /// export fails from then on, and the guest's writes go on unsaved.
    failed: AtomicBool,
    /// The export ended: writes no longer save.
    ended: AtomicBool,
}

fn test(bits: &[AtomicU64], block: u64) -> bool {
    let (word, bit) = bit(block);
    bits.get(word)
        .is_none_or(|w| w.load(Ordering::Acquire) & bit != 0)
}

/// Holds a block's claim; lets it go when dropped.
struct Claim<'a> {
    word: &'a AtomicU64,
    bit: u64,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.word.fetch_and(!self.bit, Ordering::AcqRel);
    }
}

impl Fleece {
    /// A view of `source` (`capacity` bytes, in blocks of `block`) from now on, saving into
    /// `scratch`, which the caller has made empty at the capacity (a sparse file).
    pub(super) fn new(source: Arc<Source>, scratch: File, block: u64, capacity: u64) -> Self {
        let words = || {
            (0..capacity.div_ceil(block).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        };
        Fleece {
            source,
            scratch,
            block,
            capacity,
            settled: words(),
            released: words(),
            claimed: words(),
            saved: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }

    /// Blocks a guest write saved so far.
    pub fn saved_blocks(&self) -> u64 {
        self.saved.load(Ordering::Relaxed)
    }

    /// Claims `block`, waiting while another thread holds it (one block's read or save).
    fn claim(&self, block: u64) -> Option<Claim<'_>> {
        let (word, bit) = bit(block);
        let word = self.claimed.get(word)?;
        while word.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            std::thread::yield_now();
        }
        Some(Claim { word, bit })
    }

    /// The bytes of `block` within the capacity: its offset and length.
    fn extent(&self, block: u64) -> (u64, u64) {
        let offset = block * self.block;
        (offset, self.block.min(self.capacity - offset))
    }

    /// Reads the start of `buf` from `offset` (in `block`) from one place: a run of blocks the
    /// disk still holds, claimed together (in order: two readers never wait for each other)
    /// and read at once, or one saved block from the scratch. Returns the bytes read.
    fn read_from(&self, block: u64, offset: u64, buf: &mut [u8]) -> Result<usize, u32> {
        if test(&self.released, block) {
            return Err(errno::EPERM);
        }
        let end = (offset + buf.len() as u64).div_ceil(self.block);
        let mut claims = Vec::new();
        for b in block..end {
            if test(&self.settled, b) {
                break;
            }
            let claim = self.claim(b).ok_or(errno::EIO)?;
            if test(&self.settled, b) {
                break;
            }
            claims.push(claim);
        }
        let count = claims.len() as u64;
        if count > 0 {
            // Not saved: the disk still holds them, and keeps them while the claims are held.
            let len = host_size((block + count) * self.block - offset).min(buf.len());
            self.source
                .read_at(&mut buf[..len], offset)
                .map_err(|_| errno::EIO)?;
            return Ok(len);
        }
        if test(&self.released, block) {
            return Err(errno::EPERM);
        }
        let len = host_size((block + 1) * self.block - offset).min(buf.len());
        self.scratch
            .read_exact_at(&mut buf[..len], offset)
            .map_err(|_| errno::EIO)?;
        Ok(len)
    }

    /// Releases the whole blocks of `[offset, offset + len)`: punched out of the scratch.
    fn release(&self, offset: u64, len: u64) {
        let first = offset.div_ceil(self.block);
        let end = if offset + len >= self.capacity {
            self.capacity.div_ceil(self.block)
        } else {
            (offset + len) / self.block
        };
        if first >= end {
            return;
        }
        for block in first..end {
            let _claim = self.claim(block);
            set_run(&self.released, block, 1);
            set_run(&self.settled, block, 1);
        }
        let start = first * self.block;
        let bytes = (end * self.block).min(self.capacity) - start;
        if let (Ok(start), Ok(bytes)) = (i64::try_from(start), i64::try_from(bytes)) {
            // SAFETY: fallocate on a descriptor we own, with a checked range; a file system
            // that cannot punch keeps the bytes (the space is freed at export-end).
            unsafe {
                libc::fallocate(
                    self.scratch.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    start,
                    bytes,
                );
            }
        }
    }

    /// Whether `block` of the view reads as zeros without being stored (a hole of the disk
    /// while not saved, of the scratch once saved). Unknown: not a hole.
    fn is_hole(&self, block: u64) -> bool {
        let (offset, len) = self.extent(block);
        if test(&self.released, block) || self.failed.load(Ordering::Acquire) {
            return false;
        }
        if test(&self.settled, block) {
            return is_hole(&self.scratch, offset, len);
        }
        let hole = self.source.is_hole(offset, len);
        // Saved (and then written) meanwhile: the scratch has the instant's contents.
        if test(&self.settled, block) {
            return !test(&self.released, block) && is_hole(&self.scratch, offset, len);
        }
        hole
    }

    /// The export is over: no more saves; the scratch's space is freed.
    pub(super) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        let _ = self.scratch.set_len(0);
    }
}

impl CopyFirst for Fleece {
    fn claim(&self, offset: u64, len: u64) -> Claimed {
        if len == 0
            || offset >= self.capacity
            || self.ended.load(Ordering::Acquire)
            || self.failed.load(Ordering::Acquire)
        {
            return Claimed::Runs(Vec::new());
        }
        let end = offset.saturating_add(len).min(self.capacity);
        // Saved or released blocks are skipped: the only cost once the export has them.
        claim_unsettled(
            &self.settled,
            &self.claimed,
            offset / self.block,
            end.div_ceil(self.block),
        )
    }

    fn run_bytes(&self, first: u64, count: u64) -> (u64, u64) {
        let offset = first * self.block;
        (offset, (count * self.block).min(self.capacity - offset))
    }

    fn saved(&self, first: u64, count: u64, data: &[u8]) {
        let (offset, _) = self.run_bytes(first, count);
        // The scratch is sparse at this size: zeros are there already. Once the export ended,
        // nothing reads it.
        let written = if self.ended.load(Ordering::Acquire) || data.iter().all(|&b| b == 0) {
            Ok(())
        } else {
            self.scratch.write_all_at(data, offset)
        };
        match written {
            Ok(()) => {
                set_run(&self.settled, first, count);
                self.saved.fetch_add(count, Ordering::Relaxed);
            }
            Err(e) => {
                crate::limited!(warn, "export: saving a block before a write failed: {e}");
                self.failed.store(true, Ordering::Release);
            }
        }
        let_go(&self.claimed, first, count);
    }

    fn abandon(&self, first: u64, count: u64, error: io::Error) {
        crate::limited!(
            warn,
            "export: reading a block before a write failed: {error}"
        );
        self.failed.store(true, Ordering::Release);
        let_go(&self.claimed, first, count);
    }
}

impl crate::nbd::Export for Fleece {
    fn size(&self) -> u64 {
        self.capacity
    }

    fn block_size(&self) -> u32 {
        u32::try_from(self.block).unwrap_or(u32::MAX)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), u32> {
        let mut done = 0;
        while done < buf.len() {
            if self.failed.load(Ordering::Acquire) {
                return Err(errno::EIO);
            }
            let at = offset + done as u64;
            done += self.read_from(at / self.block, at, &mut buf[done..])?;
        }
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), u32> {
        self.release(offset, len);
        Ok(())
    }

    fn allocation(&self, offset: u64, len: u64, max: usize) -> Result<Vec<(u32, u32)>, u32> {
        let end = offset.saturating_add(len).min(self.capacity);
        let mut extents: Vec<(u32, u32)> = Vec::new();
        let mut at = offset;
        while at < end {
            let block = at / self.block;
            let upto = ((block + 1) * self.block).min(end);
            let flags = if self.is_hole(block) {
                allocation::HOLE | allocation::ZERO
            } else {
                0
            };
            // A block is at most 4 GiB - 1 (the export's block size is a u32).
            let length = u32::try_from(upto - at).unwrap_or(u32::MAX);
            let count = extents.len();
            match extents.last_mut() {
                Some((l, f)) if *f == flags && l.checked_add(length).is_some() => *l += length,
                _ if count == max => break,
                _ => extents.push((length, flags)),
            }
            at = upto;
        }
        Ok(extents)
    }
}
