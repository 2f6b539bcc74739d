//! One copy-before-write snapshot: which blocks are copied, and the copy of one block.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::claims::{Claimed, bit, claim_unsettled, let_go, set_run};
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

/// What a queue's engine asks of a running snapshot or export before a guest write,
/// write-zeroes or discard: which blocks to save first, and where their old contents go. The
/// engine reads them itself (see `engine.rs`). Nothing here fails the guest's write: an error
/// fails the snapshot or the export.
pub(crate) trait CopyFirst: Send + Sync {
    /// Claims the blocks `[offset, offset + len)` touches that are not saved yet (see
    /// [`claim_unsettled`]).
    fn claim(&self, offset: u64, len: u64) -> Claimed;
    /// The bytes of the run of `count` blocks from `first` (cut at the capacity): offset, length.
    fn run_bytes(&self, first: u64, count: u64) -> (u64, u64);
    /// The old contents of a claimed run, read: stores them, marks the run saved, lets it go.
    fn saved(&self, first: u64, count: u64, data: &[u8]);
    /// A claimed run could not be read: fails the snapshot or export, lets the run go.
    fn abandon(&self, first: u64, count: u64, error: io::Error);
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
    /// makes of it); `buffer` is made on first use.
    fn copy_block(&self, block: u64, buffer: &mut Vec<u8>) -> io::Result<()> {
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
    fn claim(&self, offset: u64, len: u64) -> Claimed {
        if len == 0 || offset >= self.capacity || self.failed.load(Ordering::Acquire) {
            return Claimed::Runs(Vec::new());
        }
        let end = offset.saturating_add(len).min(self.capacity);
        claim_unsettled(
            &self.copied,
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
        // The target was made empty at this size: zeros are a hole already.
        let written = if data.iter().any(|&b| b != 0) {
            self.target.write_all_at(data, offset)
        } else {
            Ok(())
        };
        match written {
            Ok(()) => {
                set_run(&self.copied, first, count);
                self.early.fetch_add(count, Ordering::Relaxed);
            }
            Err(e) => {
                crate::limited!(warn, "snapshot: a copy before a write failed: {e}");
                self.fail(e);
            }
        }
        let_go(&self.claimed, first, count);
    }

    fn abandon(&self, first: u64, count: u64, error: io::Error) {
        crate::limited!(
            warn,
            "snapshot: reading a block before a write failed: {error}"
        );
        self.fail(error);
        let_go(&self.claimed, first, count);
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
                self.copy_block(block, &mut buffer).map(|()| 1)
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
