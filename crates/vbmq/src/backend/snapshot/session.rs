//! One copy-before-write snapshot: which blocks are copied, and the copy of one block.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;
use crate::backend::qcow2::Qcow2Reader;
use crate::backend::thin::{ThinReader, read_or_zeros};
use crate::host_size;

/// What a snapshot reads the disk's contents from, on the caller's thread.
pub(crate) enum Source {
    /// The image (buffered: coherent with the `O_DIRECT` writes of the queues, which
    /// invalidate the page cache they cover).
    File {
        /// The image.
        file: File,
        /// A regular file (a block device is never cloned).
        regular: bool,
    },
    /// A thin disk, by its map.
    Thin(ThinReader),
    /// A qcow2 disk, by its tables (the chain below included).
    Qcow2(Qcow2Reader),
}

/// What a queue's engine does before a write while a snapshot or an export runs: save what
/// the write would change.
pub(crate) trait CopyFirst: Send + Sync {
    /// Before a guest write, write-zeroes or discard of `[offset, offset + len)`, through the
    /// queue's `buffer`. Never fails the guest's write.
    fn before_write(&self, offset: u64, len: u64, buffer: &mut Vec<u8>);
}

impl Source {
    pub(super) fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Source::File { file, .. } => read_or_zeros(file, buf, offset),
            Source::Thin(reader) => reader.read_at(buf, offset),
            Source::Qcow2(reader) => reader.read_at(buf, offset),
        }
    }

    /// Whether `[offset, offset + len)` reads as zeros without being stored (a thin disk: in
    /// whichever of DISK and BASE each block is read from).
    pub(super) fn is_hole(&self, offset: u64, len: u64) -> bool {
        match self {
            Source::File { file, .. } => is_hole(file, offset, len),
            Source::Thin(reader) => {
                let end = offset.saturating_add(len);
                let mut at = offset;
                while at < end {
                    let (file, left) = reader.file_at(at);
                    let n = left.min(end - at);
                    // An NBD base's holes are not known here: its blocks count as data.
                    if !file.is_some_and(|file| is_hole(file, at, n)) {
                        return false;
                    }
                    at += n;
                }
                true
            }
            Source::Qcow2(reader) => reader.is_hole(offset, len, is_hole),
        }
    }

    /// The unit of copy, if the storage has one (a thin disk's block).
    pub(super) fn block_size(&self) -> Option<u64> {
        match self {
            Source::File { .. } | Source::Qcow2(_) => None,
            Source::Thin(reader) => Some(reader.block_size()),
        }
    }

    /// The files the disk is read from.
    pub(super) fn files(&self) -> Vec<&File> {
        match self {
            Source::File { file, .. } => vec![file],
            Source::Thin(reader) => reader.files().to_vec(),
            Source::Qcow2(reader) => reader.files(),
        }
    }
}

/// Blocks the background copy takes at a time (1 MiB of 64 KiB blocks).
const RUN: u64 = 16;

/// A copy under way.
pub(crate) struct Session {
    source: Arc<Source>,
    target: File,
    block: u64,
    capacity: u64,
    blocks: u64,
    /// Blocks whose copy is in the target, a bit each (set once the copy is written).
    copied: Vec<AtomicU64>,
    /// Blocks being copied, a bit each: whoever sets it copies, others wait for `copied`.
    claimed: Vec<AtomicU64>,
    /// Blocks a guest write copied first.
    early: AtomicU64,
    /// Why the copy failed; the guest's writes go on uncopied once set.
    failed: AtomicBool,
    error: Mutex<Option<io::Error>>,
}

fn bit(block: u64) -> (usize, u64) {
    (host_size(block / 64), 1 << (block % 64))
}

fn is_set(bits: &[AtomicU64], block: u64) -> bool {
    let (word, bit) = bit(block);
    bits.get(word)
        .is_none_or(|w| w.load(Ordering::Acquire) & bit != 0)
}

/// A buffer of `len` bytes, or an error if memory is short.
fn buffer(len: usize) -> io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    buffer
        .try_reserve_exact(len)
        .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    buffer.resize(len, 0);
    Ok(buffer)
}

impl Session {
    pub(super) fn new(source: Arc<Source>, target: File, block: u64, capacity: u64) -> Self {
        let blocks = capacity.div_ceil(block);
        let words = || {
            (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        };
        Session {
            source,
            target,
            block,
            capacity,
            blocks,
            copied: words(),
            claimed: words(),
            early: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    /// Copies block `block` unless it is copied already (waiting for a copy someone else
    /// makes of it); `buffer` is made on first use. `early`: for a guest write.
    fn copy_block(&self, block: u64, buffer: &mut Vec<u8>, early: bool) -> io::Result<()> {
        let (word, bit) = bit(block);
        let (Some(copied), Some(claimed)) = (self.copied.get(word), self.claimed.get(word)) else {
            return Ok(());
        };
        if copied.load(Ordering::Acquire) & bit != 0 {
            return Ok(());
        }
        if claimed.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            // Someone copies it (a copy takes a read and a write of one block).
            while copied.load(Ordering::Acquire) & bit == 0 && !self.failed.load(Ordering::Acquire)
            {
                std::thread::yield_now();
            }
            return Ok(());
        }
        let result = self.copy_claimed(block, buffer);
        if result.is_ok() {
            copied.fetch_or(bit, Ordering::Release);
            if early {
                self.early.fetch_add(1, Ordering::Relaxed);
            }
        }
        claimed.fetch_and(!bit, Ordering::AcqRel);
        result
    }

    fn copy_claimed(&self, block: u64, buffer: &mut Vec<u8>) -> io::Result<()> {
        self.copy_range(block * self.block, self.block, buffer)
    }

    /// Copies `len` bytes at `offset` (cut at the capacity) into the target, through `buffer`
    /// (grown on first use, then kept by its owner: no allocation per copy).
    fn copy_range(&self, offset: u64, len: u64, buffer: &mut Vec<u8>) -> io::Result<()> {
        let len = host_size((self.capacity - offset).min(len));
        if buffer.len() < len {
            *buffer = self::buffer(len)?;
        }
        let bytes = &mut buffer[..len];
        self.source.read_at(bytes, offset)?;
        // The target was made empty at this size: zeros are a hole already.
        if bytes.iter().any(|&b| b != 0) {
            self.target.write_all_at(bytes, offset)?;
        }
        Ok(())
    }

    fn fail(&self, error: io::Error) {
        lock(&self.error).get_or_insert(error);
        self.failed.store(true, Ordering::Release);
    }
}

impl CopyFirst for Session {
    /// Copies the blocks a write touches first. An error fails the snapshot, never the
    /// guest's write.
    fn before_write(&self, offset: u64, len: u64, buffer: &mut Vec<u8>) {
        if len == 0 || offset >= self.capacity || self.failed.load(Ordering::Acquire) {
            return;
        }
        let end = offset.saturating_add(len).min(self.capacity);
        for block in offset / self.block..end.div_ceil(self.block) {
            if is_set(&self.copied, block) {
                continue;
            }
            if let Err(e) = self.copy_block(block, buffer, true) {
                crate::limited!(warn, "snapshot: a copy before a write failed: {e}");
                self.fail(e);
                return;
            }
        }
    }
}

impl Session {
    /// Copies every block not copied yet, in order, up to [`RUN`] blocks at a time.
    pub(super) fn copy_all(&self) -> io::Result<()> {
        let mut buffer = Vec::new();
        let mut block = 0;
        while block < self.blocks && !self.failed.load(Ordering::Acquire) {
            let claimed = self.claim_run(block);
            let result = if claimed == 0 {
                // Copied, or being copied by a guest write: wait for that one.
                self.copy_block(block, &mut buffer, false).map(|()| 1)
            } else {
                self.copy_run(block, claimed, &mut buffer).map(|()| claimed)
            };
            match result {
                Ok(done) => block += done,
                Err(e) => self.fail(e),
            }
        }
        match lock(&self.error).take() {
            Some(e) => Err(e),
            None if self.failed.load(Ordering::Acquire) => Err(io::Error::other("copy failed")),
            None => Ok(()),
        }
    }

    /// Claims the blocks from `first` on that are neither copied nor claimed, [`RUN`] at most,
    /// stopping at the first that is; returns how many.
    fn claim_run(&self, first: u64) -> u64 {
        let mut claimed = 0;
        while claimed < RUN && first + claimed < self.blocks {
            let (word, bit) = bit(first + claimed);
            let (Some(copied), Some(claims)) = (self.copied.get(word), self.claimed.get(word))
            else {
                break;
            };
            if copied.load(Ordering::Acquire) & bit != 0
                || claims.fetch_or(bit, Ordering::AcqRel) & bit != 0
            {
                break;
            }
            claimed += 1;
        }
        claimed
    }

    /// Copies the `count` blocks from `first` on, claimed by [`Self::claim_run`], in one read
    /// and one write, then marks them copied and lets their claims go.
    fn copy_run(&self, first: u64, count: u64, buffer: &mut Vec<u8>) -> io::Result<()> {
        let result = self.copy_range(first * self.block, count * self.block, buffer);
        for block in first..first + count {
            let (word, bit) = bit(block);
            if let (Some(copied), Some(claims)) = (self.copied.get(word), self.claimed.get(word)) {
                if result.is_ok() {
                    copied.fetch_or(bit, Ordering::Release);
                }
                claims.fetch_and(!bit, Ordering::AcqRel);
            }
        }
        result
    }

    /// Syncs the target; the blocks guest writes copied first.
    pub(super) fn finish(&self) -> io::Result<u64> {
        self.target.sync_data()?;
        Ok(self.early.load(Ordering::Relaxed))
    }
}

/// Whether `[offset, offset + len)` of `file` is a hole (no data at or after `offset` before
/// its end). Errors: not a hole.
pub(super) fn is_hole(file: &File, offset: u64, len: u64) -> bool {
    let Ok(at) = i64::try_from(offset) else {
        return false;
    };
    // SAFETY: lseek on a descriptor we own; it moves a file offset nothing else uses (every
    // other access is positional).
    let data = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    if data < 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    }
    u64::try_from(data).is_ok_and(|data| data >= offset + len)
}
