//! A raw image served under `format=auto`: the guest may not write the qcow2 magic into its
//! first bytes. If it could, the next start would serve the image as qcow2, with whatever
//! backing file the guest's header names: a host file the guest was never given (QEMU refuses
//! the same writes to a raw image whose format it probed). `format=raw` lifts the guard.
//!
//! A write at offset 0 is copied once out of guest memory, checked, and written from that
//! copy: the guest cannot change the bytes between the check and the write.

use std::io;
use std::os::fd::RawFd;

use super::header::MAGIC;
use crate::backend::layer::Layer;
use crate::backend::staging::Staging;
use crate::backend::{Disk, Engine, EngineOptions, IoOp};

/// The guard, as a layer over the raw image.
pub struct ProbedRaw;

impl Layer for ProbedRaw {
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(GuardEngine {
            inner: below.engine(options)?,
            copies: Vec::new(),
            refused: Vec::new(),
        }))
    }
}

/// A queue's engine with the guard: every operation but a write at offset 0 passes as it is.
struct GuardEngine {
    /// Declared first: dropped (its operations waited for) before the copies they read.
    inner: Box<dyn Engine>,
    /// Writes at offset 0 in flight, by tag, with the copy each is written from.
    copies: Vec<(u64, Staging)>,
    /// Writes refused, to answer at the next reap.
    refused: Vec<u64>,
}

impl Engine for GuardEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        let IoOp::Write { offset: 0, iov } = op else {
            return self.inner.push(op, tag);
        };
        let len = iov.len();
        let Some(mut copy) = Staging::new(len) else {
            return Err(io::Error::from_raw_os_error(libc::ENOMEM));
        };
        // SAFETY: the staging buffer holds at least `len` bytes, and is vbmq's own memory.
        unsafe { iov.copy_out(0, copy.as_ptr(), len) };
        if copy.bytes(len).starts_with(&MAGIC) {
            crate::limited!(
                warn,
                "a guest wrote the qcow2 magic at the start of a raw image served with \
                 format=auto: refused (format=raw allows it)"
            );
            self.refused.push(tag);
            return Ok(());
        }
        let op = IoOp::Write {
            offset: 0,
            iov: copy.list(len),
        };
        self.inner.push(op, tag)?;
        self.copies.push((tag, copy));
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        if self.refused.is_empty() {
            self.inner.wait()
        } else {
            self.inner.submit()
        }
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        let copies = &mut self.copies;
        self.inner.reap(&mut |tag, result| {
            if !copies.is_empty() {
                copies.retain(|(t, _)| *t != tag);
            }
            done(tag, result);
        });
        for tag in self.refused.drain(..) {
            done(tag, -libc::EPERM);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}
