//! A queue's engine over an encrypted disk: each read and write goes through a staging buffer,
//! decrypted or encrypted on the queue's thread. Write-zeroes writes the ciphertext of zeros,
//! a piece at a time; discard is dropped unless the disk passes it down.

use std::io;
use std::sync::Arc;

use super::key_page::KeyPage;
use super::sector::SECTOR;
use super::xts::Xts;
use crate::backend::IoOp;
use crate::backend::iovec::IovList;
use crate::backend::layer::{Below, Stage, transfer_error};
use crate::backend::staging::Staging;
use crate::host_size;

/// Staging buffers kept for reuse.
const SPARE: usize = 64;
/// Bytes of one write of a write-zeroes range (the largest staging buffer kept for reuse).
const ZERO_PIECE: u64 = 1 << 20;

/// What an operation in the inner engine is for.
enum Kind {
    Write,
    /// The guest's buffers and the disk offset, filled once the read is decrypted.
    Read(IovList, u64),
    /// A piece of the write-zeroes job of this index.
    Zeroes(usize),
}

/// An operation in the inner engine.
pub enum Pending {
    /// Passed through as it is (a flush, a discard with `encrypt-discard=on`): the guest's tag.
    Plain(u64),
    /// A read or write through a staging buffer.
    Staged(Staged),
}

/// A read or write through a staging buffer.
pub struct Staged {
    tag: u64,
    staging: Staging,
    len: usize,
    kind: Kind,
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped (the
// `Engine::push` contract), and its own staging buffer; it moves between threads only with its
// queue's engine and is never shared.
unsafe impl Send for Pending {}

/// A write-zeroes range, written one piece at a time (so a request of 16 ranges of 1 GiB has
/// 16 operations in flight, as many as its ranges).
struct ZeroJob {
    tag: u64,
    next: u64,
    end: u64,
    /// The first failure; no piece is written after it.
    error: i32,
}

/// Encrypts the guest's bytes of `iov` into `staging` (`encrypt`), or decrypts `staging` into
/// them, the first sector being number `first`: the sectors lying whole in one segment straight
/// from or into it (the guest's memory is read or written once), a sector that segments cut in
/// two through its place in `staging` (copied from the guest before its encryption, to the
/// guest after its decryption).
fn crypt_segments(xts: &Xts, iov: &IovList, staging: &mut [u8], first: u64, encrypt: bool) {
    let len = staging.len();
    let (mut at, mut start) = (0usize, 0usize);
    for v in iov.iovecs() {
        let end = start.saturating_add(v.iov_len);
        if (start..end).contains(&at) && at < len {
            let whole = (end.min(len) - at) / SECTOR * SECTOR;
            let sector = first.wrapping_add((at / SECTOR) as u64);
            let (buf, guest) = (&mut staging[at..at + whole], v.iov_base.cast::<u8>());
            // SAFETY: `at - start + whole <= iov_len`: the bytes lie in this segment (the
            // `push` contract), apart from the staging buffer.
            unsafe {
                let guest = guest.add(at - start);
                if encrypt {
                    xts.encrypt_from(guest, buf, sector);
                } else {
                    xts.decrypt_into(buf, guest, sector);
                }
            }
            at += whole;
            if at < end && at + SECTOR <= len {
                let sector = first.wrapping_add((at / SECTOR) as u64);
                let buf = &mut staging[at..at + SECTOR];
                // SAFETY: `buf` is a sector of the staging buffer, apart from guest memory.
                unsafe {
                    if encrypt {
                        iov.copy_out(at, buf.as_mut_ptr(), SECTOR);
                        xts.encrypt(buf, sector);
                    } else {
                        xts.decrypt(buf, sector);
                        iov.copy_in(at, buf.as_ptr(), SECTOR);
                    }
                }
                at += SECTOR;
            }
        }
        start = end;
    }
}

/// A queue's engine over an encrypted disk: the layer's part (see [`Stage`]).
pub struct CryptStage {
    xts: Arc<KeyPage>,
    /// Discards go to the inner disk (`encrypt-discard=on`), else are answered at once.
    pass_discard: bool,
    zero_jobs: Vec<Option<ZeroJob>>,
    spare: Vec<Staging>,
}

impl CryptStage {
    pub fn new(xts: Arc<KeyPage>, pass_discard: bool) -> Self {
        CryptStage {
            xts,
            pass_discard,
            zero_jobs: Vec::new(),
            spare: Vec::new(),
        }
    }

    fn staging(&mut self, len: usize) -> io::Result<Staging> {
        if let Some(i) = self.spare.iter().position(|s| s.capacity() >= len) {
            return Ok(self.spare.swap_remove(i));
        }
        Staging::new(len.next_power_of_two())
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))
    }

    fn recycle(&mut self, staging: Staging) {
        if self.spare.len() < SPARE && staging.capacity() <= 1 << 20 {
            self.spare.push(staging);
        }
    }

    /// Queues a read or write of `len` bytes at `offset` through a staging buffer.
    fn stage(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
        write: bool,
    ) -> io::Result<()> {
        let len = iov.len();
        if !offset.is_multiple_of(SECTOR as u64) || !len.is_multiple_of(SECTOR) || len == 0 {
            below.answer(tag, -libc::EINVAL);
            return Ok(());
        }
        let mut staging = self.staging(len)?;
        let first = offset / SECTOR as u64;
        if write {
            crypt_segments(&self.xts, &iov, staging.bytes(len), first, true);
        }
        let kind = if write {
            Kind::Write
        } else {
            Kind::Read(iov, offset)
        };
        queue(below, tag, staging, len, offset, kind)
    }

    /// Write-zeroes of `len` bytes at `offset`: the ciphertext of zero sectors is written (a
    /// hole or zeros in the image would show which ranges the guest zeroed).
    fn zeroes(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        len: u64,
        tag: u64,
    ) -> io::Result<()> {
        let sector = SECTOR as u64;
        if !offset.is_multiple_of(sector) || !len.is_multiple_of(sector) {
            below.answer(tag, -libc::EINVAL);
            return Ok(());
        }
        if len == 0 {
            below.answer(tag, 0);
            return Ok(());
        }
        let job = ZeroJob {
            tag,
            next: offset,
            end: offset.saturating_add(len),
            error: 0,
        };
        let index = match self.zero_jobs.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.zero_jobs.push(None);
                self.zero_jobs.len() - 1
            }
        };
        self.zero_jobs[index] = Some(job);
        let queued = self.next_piece(below, index);
        if queued.is_err() {
            self.zero_jobs[index] = None;
        }
        queued
    }

    /// Queues the next piece of write-zeroes job `index`.
    fn next_piece(&mut self, below: &mut Below<Self>, index: usize) -> io::Result<()> {
        let Some(job) = self.zero_jobs.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        let (tag, offset) = (job.tag, job.next);
        let len = host_size((job.end - offset).min(ZERO_PIECE));
        job.next += len as u64;
        let mut staging = self.staging(len)?;
        let buf = staging.bytes(len);
        buf.fill(0);
        self.xts.encrypt(buf, offset / SECTOR as u64);
        queue(below, tag, staging, len, offset, Kind::Zeroes(index))
    }

    /// A piece of write-zeroes job `index` finished with `ok` (or `error`): the guest's
    /// completion once the last one has.
    fn piece_done(
        &mut self,
        below: &mut Below<Self>,
        index: usize,
        ok: bool,
        error: i32,
    ) -> Option<(u64, i32)> {
        let job = self.zero_jobs.get_mut(index)?.as_mut()?;
        if !ok && job.error == 0 {
            job.error = error;
        }
        if job.error == 0 && job.next < job.end {
            match self.next_piece(below, index) {
                Ok(()) => return None,
                Err(e) => {
                    crate::limited!(warn, "encrypted disk: write-zeroes: {e}");
                    if let Some(job) = self.zero_jobs.get_mut(index).and_then(Option::as_mut) {
                        job.error = -libc::EIO;
                    }
                }
            }
        }
        let job = self.zero_jobs.get_mut(index)?.take()?;
        Some((job.tag, job.error))
    }

    /// The guest's completion of staged operation `p`.
    fn finish(
        &mut self,
        below: &mut Below<Self>,
        mut p: Staged,
        result: i32,
    ) -> Option<(u64, i32)> {
        let error = transfer_error(result, p.len);
        let whole = error == 0;
        let result = match (whole, p.kind) {
            (_, Kind::Zeroes(index)) => {
                self.recycle(p.staging);
                return self.piece_done(below, index, whole, error);
            }
            (false, _) => error,
            (true, Kind::Read(iov, offset)) => {
                let first = offset / SECTOR as u64;
                crypt_segments(&self.xts, &iov, p.staging.bytes(p.len), first, false);
                result
            }
            (true, Kind::Write) => result,
        };
        let tag = p.tag;
        self.recycle(p.staging);
        Some((tag, result))
    }
}

/// Hands the read or write of `staging`'s first `len` bytes at `offset` to the inner engine.
fn queue(
    below: &mut Below<CryptStage>,
    tag: u64,
    mut staging: Staging,
    len: usize,
    offset: u64,
    kind: Kind,
) -> io::Result<()> {
    let iov = staging.list(len);
    let op = match kind {
        Kind::Read(..) => IoOp::Read { offset, iov },
        Kind::Write | Kind::Zeroes(_) => IoOp::Write { offset, iov },
    };
    let pending = Pending::Staged(Staged {
        tag,
        staging,
        len,
        kind,
    });
    below.forward(op, pending)
}

impl Stage for CryptStage {
    type Pending = Pending;
    type Below = Box<dyn crate::backend::Engine>;
    const NAME: &'static str = "encrypted disk";

    fn push(&mut self, below: &mut Below<Self>, op: IoOp, tag: u64) -> io::Result<()> {
        match op {
            IoOp::Read { offset, iov } => self.stage(below, offset, iov, tag, false),
            IoOp::Write { offset, iov } => self.stage(below, offset, iov, tag, true),
            IoOp::WriteZeroes { offset, len, .. } => self.zeroes(below, offset, len, tag),
            IoOp::Flush => below.forward(op, Pending::Plain(tag)),
            IoOp::Discard { .. } if self.pass_discard => below.forward(op, Pending::Plain(tag)),
            // Dropped: the range keeps its old ciphertext (a hole would show it is unused).
            IoOp::Discard { .. } => {
                below.answer(tag, 0);
                Ok(())
            }
        }
    }

    fn complete(&mut self, below: &mut Below<Self>, pending: Pending, result: i32) {
        let answer = match pending {
            Pending::Plain(tag) => Some((tag, result)),
            Pending::Staged(p) => self.finish(below, p, result),
        };
        if let Some((tag, result)) = answer {
            below.answer(tag, result);
        }
    }
}
