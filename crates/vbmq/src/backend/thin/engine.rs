//! A queue's engine over a thin disk: one io_uring with DISK's and BASE's files registered.
//!
//! Reads and writes wholly in blocks DISK holds go to DISK as they are, and reads wholly in
//! blocks it lacks go to BASE as they are: one bitmap lookup per block, no extra system call.
//! Other requests are split by block. A write to a block DISK lacks claims the block (a write
//! to a block claimed elsewhere waits), reads the whole block from BASE into a staging buffer
//! unless the write covers it, lays the guest's bytes over it, writes the block to DISK, and
//! is acknowledged once [`ThinMap::commit`] has recorded the block, once per reaping pass.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::map::ThinMap;
use super::remote::ThinBelow;
use crate::backend::iovec::IovList;
use crate::backend::layer::{Below, Part, Slab, Splits, Stage, errno, transfer_error};
use crate::backend::staging::Staging;
use crate::backend::uring::UringEngine;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// A block being copied into DISK.
struct Job {
    block: u64,
    len: usize,
    staging: Staging,
    /// The guest's bytes to lay over the block: (guest list, offset in it, offset in block, bytes).
    overlay: Option<(IovList, usize, usize, usize)>,
    /// A read served from the copied block (copy on read): the same shape.
    copy_out: Option<(IovList, usize, usize, usize)>,
    /// Bytes of the block to zero (write-zeroes): offset in block, bytes.
    zero: Option<(usize, usize)>,
    parent: usize,
}

/// What an operation in the ring is for.
pub enum Op {
    /// The guest's request as it came: its result is the guest's.
    Whole(u64),
    /// A part of a split request.
    Part(Part),
    /// A job's read of its block from BASE.
    BaseRead(usize),
    /// A job's write of its block to DISK.
    DataWrite(usize),
    /// Write-zeroes of whole blocks on DISK; the blocks DISK lacked, claimed, are recorded
    /// once it is done.
    Zeroed { parent: usize, blocks: Vec<u64> },
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped (the
// `Engine::push` contract); it moves between threads only with its queue's engine.
unsafe impl Send for Op {}

/// A queue's engine over a thin disk: the disk's part (see [`Stage`]) over its ring.
pub struct ThinStage {
    map: Arc<ThinMap>,
    copy_on_read: bool,
    splits: Splits,
    jobs: Slab<Job>,
    /// Jobs whose block is written, to commit at the end of the pass.
    written: Vec<usize>,
    /// Whole blocks zeroed on DISK, to commit at the end of the pass, with their request.
    zeroed: Vec<(usize, Vec<u64>)>,
    /// Writes waiting for a block another job holds.
    deferred: VecDeque<(IoOp, u64)>,
    spare: Vec<Staging>,
}

// SAFETY: the raw pointers it holds are guest iovecs, valid until their operation is reaped (the
// `Engine::push` contract), and its own staging buffers; the engine moves between threads only
// with its worker and is never shared.
unsafe impl Send for ThinStage {}

impl ThinStage {
    pub fn new(map: Arc<ThinMap>, copy_on_read: bool) -> Self {
        ThinStage {
            map,
            copy_on_read,
            splits: Splits::default(),
            jobs: Slab::new(),
            written: Vec::new(),
            zeroed: Vec::new(),
            deferred: VecDeque::new(),
            spare: Vec::new(),
        }
    }

    /// Queues `op` on DISK (`base`: a read of BASE) for `what`.
    fn forward(below: &mut Below<Self>, io: IoOp, base: bool, what: Op) -> io::Result<()> {
        match io {
            IoOp::Read { offset, iov } if base => {
                below.forward_with(what, |ring, tag| ring.push_base_read(offset, iov, tag))
            }
            _ => below.forward(io, what),
        }
    }

    /// The blocks `[offset, offset + len)` spans.
    fn blocks(&self, offset: u64, len: usize) -> (u64, u64) {
        let bs = self.map.block_size();
        (offset / bs, (offset + len as u64).div_ceil(bs))
    }

    fn push_read(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
    ) -> io::Result<()> {
        let len = iov.len();
        let (first, end) = self.blocks(offset, len);
        let present = (first..end).filter(|b| self.map.is_present(*b)).count() as u64;
        if len == 0 || present == end - first {
            return Self::forward(below, IoOp::Read { offset, iov }, false, Op::Whole(tag));
        }
        if present == 0 && !self.copy_on_read {
            return Self::forward(below, IoOp::Read { offset, iov }, true, Op::Whole(tag));
        }
        self.split(below, offset, iov, tag, false)
    }

    fn push_write(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
    ) -> io::Result<()> {
        let len = iov.len();
        let (first, end) = self.blocks(offset, len);
        if (first..end).all(|b| self.map.is_present(b)) {
            return Self::forward(below, IoOp::Write { offset, iov }, false, Op::Whole(tag));
        }
        // Claim every block DISK lacks, or none.
        let mut claimed = Vec::new();
        for block in (first..end).filter(|b| !self.map.is_present(*b)) {
            if !self.map.try_claim(block) {
                for b in claimed {
                    self.map.release(b);
                }
                self.deferred.push_back((IoOp::Write { offset, iov }, tag));
                return Ok(());
            }
            claimed.push(block);
        }
        // A block another job recorded before giving it up is DISK's now: written as it is.
        // The others stay claimed until their job ends: only a claim's holder records a block.
        for block in claimed {
            self.release_if_present(block);
        }
        self.split(below, offset, iov, tag, true)
    }

    /// Serves a request block by block: runs of blocks DISK holds go to DISK, blocks it lacks
    /// to BASE (reads) or to a copy job (writes, claimed by the caller; reads with copy on
    /// read, claimed here when free).
    fn split(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
        write: bool,
    ) -> io::Result<()> {
        let len = iov.len();
        let Ok(total) = i32::try_from(len) else {
            below.answer(tag, -libc::EINVAL);
            return Ok(());
        };
        let bs = self.map.block_size();
        let (first, end) = self.blocks(offset, len);
        let parent = self.splits.begin(tag, total);
        let mut block = first;
        while block < end {
            let present = self.map.is_present(block);
            // A write holds the claims of the blocks DISK lacks (see `push_write`).
            let claimed = !present
                && (write
                    || (self.copy_on_read
                        && self.map.try_claim(block)
                        && !self.release_if_present(block)));
            let present = present || (!claimed && self.map.is_present(block));
            let mut run_end = block + 1;
            if !claimed {
                while run_end < end
                    && self.map.is_present(run_end) == present
                    && (present || !self.copy_on_read)
                {
                    run_end += 1;
                }
            }
            let from = offset.max(block * bs);
            let to = (offset + len as u64).min(run_end * bs);
            let (at, n) = (host_size(from - offset), host_size(to - from));
            let result = if claimed {
                self.start_job(
                    below,
                    block,
                    iov,
                    at,
                    host_size(from - block * bs),
                    n,
                    write,
                    parent,
                )
            } else {
                let (part, list) = Part::of(parent, iov, at, n);
                let io = if write {
                    IoOp::Write {
                        offset: from,
                        iov: list,
                    }
                } else {
                    IoOp::Read {
                        offset: from,
                        iov: list,
                    }
                };
                Self::forward(below, io, !present, Op::Part(part))
            };
            match result {
                Ok(()) => self.splits.add_part(parent),
                Err(e) => {
                    if claimed {
                        self.map.release(block);
                    }
                    self.splits.fail(parent, errno(&e));
                    // The blocks claimed for the parts not started are given back.
                    if write {
                        for b in run_end..end {
                            if !self.map.is_present(b) {
                                self.map.release(b);
                            }
                        }
                    }
                    break;
                }
            }
            block = run_end;
        }
        self.splits.part_done(below, parent, 0);
        Ok(())
    }

    /// Write-zeroes: blocks it covers whole are zeroed on DISK in one operation and recorded
    /// (those DISK lacked); a block it covers in part is zeroed on DISK if DISK holds it, else
    /// copied from the base with the part zeroed, as a write.
    fn push_zeroes(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        len: u64,
        unmap: bool,
        tag: u64,
    ) -> io::Result<()> {
        let bs = self.map.block_size();
        let stop = offset.saturating_add(len);
        let (first, end) = (offset / bs, stop.div_ceil(bs));
        if first >= end {
            below.answer(tag, 0);
            return Ok(());
        }
        let mut claimed = Vec::new();
        for block in (first..end).filter(|b| !self.map.is_present(*b)) {
            if !self.map.try_claim(block) {
                for b in claimed {
                    self.map.release(b);
                }
                let op = IoOp::WriteZeroes { offset, len, unmap };
                self.deferred.push_back((op, tag));
                return Ok(());
            }
            claimed.push(block);
        }
        claimed.retain(|b| !self.release_if_present(*b));
        // Blocks covered whole: [whole_first, whole_end); the last one may be short.
        let last = end - 1;
        let whole_first = offset.div_ceil(bs);
        let whole_end = if stop == last * bs + self.map.block_len(last) {
            end
        } else {
            stop / bs
        };
        let whole = whole_first..whole_end.max(whole_first);
        let (mut lacking, mut partial): (Vec<u64>, Vec<u64>) =
            claimed.into_iter().partition(|b| whole.contains(b));
        let parent = self.splits.begin(tag, 0);
        let mut result = Ok(());
        for block in (first..end).filter(|b| !whole.contains(b)) {
            let from = offset.max(block * bs);
            let to = stop.min(block * bs + self.map.block_len(block));
            let n = host_size(to - from);
            result = if let Some(i) = partial.iter().position(|b| *b == block) {
                partial.swap_remove(i);
                let started =
                    self.start_zero_job(below, block, host_size(from - block * bs), n, parent);
                if started.is_err() {
                    self.map.release(block);
                }
                started
            } else {
                let op = IoOp::WriteZeroes {
                    offset: from,
                    len: n as u64,
                    unmap,
                };
                Self::forward(below, op, false, Op::Part(Part::without_data(parent)))
            };
            if result.is_err() {
                break;
            }
            self.splits.add_part(parent);
        }
        if result.is_ok() && !whole.is_empty() {
            let from = whole.start * bs;
            let to = stop.min(whole.end * bs);
            let op = IoOp::WriteZeroes {
                offset: from,
                len: to - from,
                unmap,
            };
            let blocks = std::mem::take(&mut lacking);
            let forwarded = Self::forward(below, op, false, Op::Zeroed { parent, blocks });
            match forwarded {
                Ok(()) => self.splits.add_part(parent),
                // The operation was dropped with its blocks: claim them back to release them.
                Err(e) => {
                    lacking = whole.filter(|b| !self.map.is_present(*b)).collect();
                    result = Err(e);
                }
            }
        }
        // Claims of parts never started are given back.
        for block in partial.into_iter().chain(lacking) {
            self.map.release(block);
        }
        if let Err(e) = result {
            self.splits.fail(parent, errno(&e));
        }
        self.splits.part_done(below, parent, 0);
        Ok(())
    }

    /// Copies `block` from the base with `n` bytes from `within` zeroed (claimed by the caller).
    fn start_zero_job(
        &mut self,
        below: &mut Below<Self>,
        block: u64,
        within: usize,
        n: usize,
        parent: usize,
    ) -> io::Result<()> {
        self.start_copy(below, block, parent, false, |job| {
            job.zero = Some((within, n))
        })
    }

    /// Gives back a block claimed after another job made it present; true if so.
    fn release_if_present(&self, block: u64) -> bool {
        if self.map.is_present(block) {
            self.map.release(block);
            return true;
        }
        false
    }

    #[allow(clippy::too_many_arguments)]
    fn start_job(
        &mut self,
        below: &mut Below<Self>,
        block: u64,
        iov: IovList,
        at: usize,
        within: usize,
        n: usize,
        write: bool,
        parent: usize,
    ) -> io::Result<()> {
        let piece = Some((iov, at, within, n));
        let whole = write && within == 0 && n == host_size(self.map.block_len(block));
        self.start_copy(below, block, parent, whole, |job| {
            if write {
                job.overlay = piece;
            } else {
                job.copy_out = piece;
            }
        })
    }

    /// Copies `block` (claimed by the caller) into DISK for `parent`, doing with it what `set`
    /// adds to the job: written at once when `whole` (the guest's bytes cover it), else read
    /// from BASE first.
    fn start_copy(
        &mut self,
        below: &mut Below<Self>,
        block: u64,
        parent: usize,
        whole: bool,
        set: impl FnOnce(&mut Job),
    ) -> io::Result<()> {
        let staging = match self.spare.pop() {
            Some(s) => s,
            None => Staging::new(host_size(self.map.block_size()))
                .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?,
        };
        let mut job = Job {
            block,
            len: host_size(self.map.block_len(block)),
            staging,
            overlay: None,
            copy_out: None,
            zero: None,
            parent,
        };
        set(&mut job);
        let job = self.jobs.insert(job);
        let result = if whole {
            self.write_block(below, job)
        } else {
            self.read_block(below, job)
        };
        if result.is_err()
            && let Some(job) = self.jobs.take(job)
        {
            self.spare.push(job.staging);
        }
        result
    }

    fn read_block(&mut self, below: &mut Below<Self>, job: usize) -> io::Result<()> {
        let bs = self.map.block_size();
        let Some(j) = self.jobs.get_mut(job) else {
            return Err(io::Error::other("no such job"));
        };
        let (offset, list) = (j.block * bs, j.staging.list(j.len));
        Self::forward(
            below,
            IoOp::Read { offset, iov: list },
            true,
            Op::BaseRead(job),
        )
    }

    /// Lays the guest's bytes over the staged block and writes the block to DISK.
    fn write_block(&mut self, below: &mut Below<Self>, job: usize) -> io::Result<()> {
        let bs = self.map.block_size();
        let Some(j) = self.jobs.get_mut(job) else {
            return Err(io::Error::other("no such job"));
        };
        if let Some((iov, at, within, n)) = j.overlay {
            // SAFETY: `within + n <= len <= ` the staging buffer's size; guest buffers never
            // overlap it.
            unsafe { iov.copy_out(at, j.staging.as_ptr().add(within), n) };
        }
        if let Some((within, n)) = j.zero {
            j.staging.bytes(j.len)[within..within + n].fill(0);
        }
        let (offset, list) = (j.block * bs, j.staging.list(j.len));
        Self::forward(
            below,
            IoOp::Write { offset, iov: list },
            false,
            Op::DataWrite(job),
        )
    }

    /// Ends a job: its block is given back, its parent hears `error`.
    fn end_job(&mut self, below: &mut Below<Self>, job: usize, error: i32) {
        let Some(j) = self.jobs.take(job) else {
            return;
        };
        if error == 0
            && let Some((iov, at, within, n)) = j.copy_out
        {
            // SAFETY: as in `write_block`, the other way.
            unsafe { iov.copy_in(at, j.staging.as_ptr().add(within), n) };
        }
        self.map.release(j.block);
        self.splits.part_done(below, j.parent, error);
        self.spare.push(j.staging);
    }

    /// Handles one completion of the ring.
    fn finish(&mut self, below: &mut Below<Self>, op: Op, result: i32) {
        let short = |expect: usize| transfer_error(result, expect);
        match op {
            Op::Whole(tag) => below.answer(tag, result),
            Op::Part(part) => self
                .splits
                .part_done(below, part.parent, part.error(result)),
            Op::BaseRead(job) => {
                let len = self.jobs.get_mut(job).map_or(0, |j| j.len);
                let error = short(len);
                let error = if error == 0 {
                    self.write_block(below, job).err().map_or(0, |e| errno(&e))
                } else {
                    error
                };
                if error != 0 {
                    self.end_job(below, job, error);
                }
            }
            Op::Zeroed { parent, blocks } => match short(0) {
                0 => self.zeroed.push((parent, blocks)),
                error => {
                    for block in blocks {
                        self.map.release(block);
                    }
                    self.splits.part_done(below, parent, error);
                }
            },
            Op::DataWrite(job) => {
                let len = self.jobs.get_mut(job).map_or(0, |j| j.len);
                match short(len) {
                    0 => self.written.push(job),
                    error => self.end_job(below, job, error),
                }
            }
        }
    }

    /// Records the blocks written this pass, then acknowledges their requests.
    fn commit(&mut self, below: &mut Below<Self>) {
        if self.written.is_empty() && self.zeroed.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.written);
        let zeroed = std::mem::take(&mut self.zeroed);
        let mut blocks: Vec<u64> = jobs
            .iter()
            .filter_map(|j| self.jobs.get(*j).map(|j| j.block))
            .collect();
        blocks.extend(zeroed.iter().flat_map(|(_, blocks)| blocks.iter().copied()));
        let error = match self.map.commit(&blocks) {
            Ok(()) => 0,
            Err(e) => {
                crate::limited!(error, "thin disk: cannot record copied blocks: {e}");
                errno(&e)
            }
        };
        for job in jobs {
            self.end_job(below, job, error);
        }
        for (parent, blocks) in zeroed {
            for block in blocks {
                self.map.release(block);
            }
            self.splits.part_done(below, parent, error);
        }
    }

    /// Tries the writes that waited for a block again.
    fn retry_deferred(&mut self, below: &mut Below<Self>) {
        for _ in 0..self.deferred.len() {
            let Some((op, tag)) = self.deferred.pop_front() else {
                break;
            };
            if let Err(e) = self.push(below, op, tag) {
                below.answer(tag, errno(&e));
            }
        }
    }
}

impl Stage for ThinStage {
    type Pending = Op;
    type Below = ThinBelow;
    const NAME: &'static str = "thin disk";

    fn push(&mut self, below: &mut Below<Self>, op: IoOp, tag: u64) -> io::Result<()> {
        match op {
            IoOp::Read { offset, iov } => self.push_read(below, offset, iov, tag),
            IoOp::Write { offset, iov } => self.push_write(below, offset, iov, tag),
            IoOp::Flush => Self::forward(below, op, false, Op::Whole(tag)),
            // Advisory: blocks DISK lacks keep reading the base.
            IoOp::Discard { .. } => Self::forward(below, op, false, Op::Whole(tag)),
            IoOp::WriteZeroes { offset, len, unmap } => {
                self.push_zeroes(below, offset, len, unmap, tag)
            }
        }
    }

    fn complete(&mut self, below: &mut Below<Self>, op: Op, result: i32) {
        self.finish(below, op, result);
    }

    fn end_pass(&mut self, below: &mut Below<Self>) {
        self.commit(below);
        if !self.deferred.is_empty() {
            self.retry_deferred(below);
            if below.in_flight() == 0 && !self.deferred.is_empty() {
                // Waiting for another queue's job, which will not wake this queue: come back.
                std::thread::sleep(Duration::from_micros(20));
                wake(below.engine().ring());
            }
        }
        if let Err(e) = below.submit() {
            crate::limited!(debug, "thin disk: submit: {e}");
        }
    }

    fn wait(&mut self, below: &mut Below<Self>) -> io::Result<()> {
        if !self.written.is_empty() || !self.zeroed.is_empty() {
            return below.submit();
        }
        if below.in_flight() == 0 && !below.has_answers() {
            // Only writes waiting for another queue's block: let it finish.
            std::thread::sleep(Duration::from_micros(50));
            return Ok(());
        }
        below.wait()
    }

    fn leak(&mut self) {
        for job in self.jobs.drain() {
            std::mem::forget(job.staging);
        }
    }
}

/// Makes the ring's completion eventfd readable, so that a sleeping worker reaps again.
fn wake(ring: &UringEngine) {
    if let Some(fd) = ring.completion_fd() {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a u64 to an eventfd the ring owns.
        let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

impl Drop for ThinStage {
    fn drop(&mut self) {
        // Copies never recorded are given back, unacknowledged.
        for job in self.jobs.values() {
            self.map.release(job.block);
        }
    }
}
