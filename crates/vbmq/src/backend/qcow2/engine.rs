//! A queue's engine over a qcow2 disk: the top image's ring does the data I/O.
//!
//! A read or write that lies in one run of plain data of the top file (every request, on a
//! fully allocated image, that does not cross a cluster) is handed to the ring as it came, at
//! its host offset: one table lookup in memory, no extra system call. A read that does not is
//! split: its plain-data parts go to the ring, the rest (zeros, backing files, compressed
//! clusters) is filled on the queue's thread. A write into a new cluster that reads as zeros
//! goes to the ring too, once the [`Writer`] has allocated it; one that needs a cluster's old
//! bytes copied (a backing file, a compressed cluster), and discard and write-zeroes, are done
//! on the queue's thread by the [`Writer`], which orders the metadata as QEMU does. A flush
//! writes back the metadata changed since the last one before the ring's flush.

use std::io;
use std::sync::Arc;

use super::image::{Extent, Qcow2Image};
use super::write::Writer;
use crate::backend::IoOp;
use crate::backend::iovec::IovList;
use crate::backend::layer::{Below, Part, Splits, Stage, errno};
use crate::backend::uring::UringEngine;
use crate::host_size;

/// What an operation in the ring is for.
pub enum Op {
    /// The guest's request as it came.
    Whole(u64),
    /// A part of a split read.
    Part(Part),
}

/// The qcow2 part of a queue's engine (see [`Stage`]).
pub struct Qcow2Stage {
    image: Arc<Qcow2Image>,
    writer: Option<Arc<Writer>>,
    splits: Splits,
}

fn bytes(len: usize) -> i32 {
    i32::try_from(len).unwrap_or(i32::MAX)
}

impl Qcow2Stage {
    pub fn new(image: Arc<Qcow2Image>, writer: Option<Arc<Writer>>) -> Self {
        Qcow2Stage {
            image,
            writer,
            splits: Splits::default(),
        }
    }

    /// Reads; `Some(result)` when answered now rather than by the ring.
    fn read(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
    ) -> Option<i32> {
        let len = iov.len();
        match self.image.lookup(offset, len as u64) {
            Ok((Extent::Data(host), n)) if n == len as u64 => {
                let op = IoOp::Read { offset: host, iov };
                return below.forward(op, Op::Whole(tag)).err().map(|e| errno(&e));
            }
            Ok(_) => {}
            Err(e) => return Some(errno(&e)),
        }
        let parent = self.splits.begin(tag, bytes(len));
        let error = match self.split_read(below, offset, iov, parent) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        };
        self.splits.part_done(below, parent, error);
        None
    }

    /// Hands the plain-data parts of a read to the ring and fills the rest now.
    fn split_read(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        parent: usize,
    ) -> io::Result<()> {
        let len = iov.len();
        let mut done = 0;
        let mut buf = Vec::new();
        while done < len {
            let at = offset + done as u64;
            let (extent, n) = self.image.lookup(at, (len - done) as u64)?;
            let n = host_size(n);
            if let Extent::Data(host) = extent {
                let (part, list) = Part::of(parent, iov, done, n);
                let op = IoOp::Read {
                    offset: host,
                    iov: list,
                };
                below.forward(op, Op::Part(part))?;
                self.splits.add_part(parent);
            } else {
                buf.resize(n, 0);
                self.image.read_at(&mut buf, at)?;
                // SAFETY: `buf` holds `n` bytes, and is vbmq's own memory.
                unsafe { iov.copy_in(done, buf.as_ptr(), n) };
            }
            done += n;
        }
        Ok(())
    }

    /// Writes; `Some(result)` when answered now rather than by the ring.
    fn write(
        &mut self,
        below: &mut Below<Self>,
        offset: u64,
        iov: IovList,
        tag: u64,
    ) -> Option<i32> {
        let Some(writer) = self.writer.clone() else {
            return Some(-libc::EROFS);
        };
        let len = iov.len();
        // Where the data goes as it is: in place, else in a cluster allocated zeroed for it.
        let placed = match writer.in_place(offset, len as u64) {
            Ok(None) => writer.allocate_zeroed(offset, len as u64),
            found => found,
        };
        match placed {
            Ok(Some(host)) => {
                let op = IoOp::Write { offset: host, iov };
                return below.forward(op, Op::Whole(tag)).err().map(|e| errno(&e));
            }
            Ok(None) => {}
            Err(e) => return Some(errno(&e)),
        }
        let mut data = vec![0; len];
        // SAFETY: `data` holds `len` bytes, and is vbmq's own memory.
        unsafe { iov.copy_out(0, data.as_mut_ptr(), len) };
        Some(match writer.write(offset, &data) {
            Ok(()) => bytes(len),
            Err(e) => errno(&e),
        })
    }

    fn zero(&mut self, offset: u64, len: u64, unmap: bool) -> i32 {
        let Some(writer) = self.writer.clone() else {
            return -libc::EROFS;
        };
        match writer.zero(offset, len, unmap) {
            Ok(()) => 0,
            Err(e) => errno(&e),
        }
    }
}

impl Stage for Qcow2Stage {
    type Pending = Op;
    type Below = UringEngine;
    const NAME: &'static str = "qcow2";

    fn push(&mut self, below: &mut Below<Self>, op: IoOp, tag: u64) -> io::Result<()> {
        let answer = match op {
            IoOp::Read { offset, iov } => self.read(below, offset, iov, tag),
            IoOp::Write { offset, iov } => self.write(below, offset, iov, tag),
            IoOp::Flush => match self.writer.as_ref().map(|w| w.write_back()) {
                Some(Err(e)) => Some(errno(&e)),
                _ => return below.forward(IoOp::Flush, Op::Whole(tag)),
            },
            IoOp::Discard { offset, len } => Some(self.zero(offset, len, true)),
            IoOp::WriteZeroes { offset, len, unmap } => Some(self.zero(offset, len, unmap)),
        };
        if let Some(answer) = answer {
            below.answer(tag, answer);
        }
        Ok(())
    }

    fn complete(&mut self, below: &mut Below<Self>, pending: Op, result: i32) {
        match pending {
            Op::Whole(tag) => below.answer(tag, result),
            Op::Part(part) => self
                .splits
                .part_done(below, part.parent, part.error(result)),
        }
    }
}
