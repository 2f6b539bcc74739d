//! One operation at a time through an engine of a disk, waiting for each: the control plane's
//! own I/O (a writable export's clients, a mirror's background copy), never a guest queue's.
//! The operations go through the disk's whole stack, so the layers see them as they see a
//! guest's.

use std::io;

use super::staging::Staging;
use super::{Disk, Engine, EngineOptions, IoOp};

/// Bytes moved by one operation at most.
pub const CHUNK: usize = 1 << 20;

/// An engine of its own and a buffer fit for `O_DIRECT`.
pub struct EngineIo {
    engine: Box<dyn Engine>,
    staging: Staging,
}

fn short() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "the disk moved no bytes")
}

impl EngineIo {
    /// An engine of `disk` for one operation at a time.
    pub fn new(disk: &dyn Disk) -> io::Result<Self> {
        let engine = disk.engine(EngineOptions {
            depth: 1,
            batch: true,
            notify: false,
        })?;
        let staging =
            Staging::new(CHUNK).ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(EngineIo { engine, staging })
    }

    /// Runs `op` to its completion: bytes moved.
    fn run(&mut self, op: IoOp) -> io::Result<usize> {
        self.engine.push(op, 0)?;
        self.engine.submit()?;
        loop {
            let mut result = None;
            self.engine.reap(&mut |_, r| result = Some(r));
            match result {
                Some(r) if r < 0 => return Err(io::Error::from_raw_os_error(-r)),
                Some(r) => return Ok(usize::try_from(r).unwrap_or(0)),
                None => self.engine.wait()?,
            }
        }
    }

    /// Fills `buf` from `offset`.
    pub fn read(&mut self, mut offset: u64, buf: &mut [u8]) -> io::Result<()> {
        for piece in buf.chunks_mut(CHUNK) {
            let mut done = 0;
            while done < piece.len() {
                let len = piece.len() - done;
                let iov = self.staging.list(len);
                let at = offset + done as u64;
                let n = self.run(IoOp::Read { offset: at, iov })?.min(len);
                if n == 0 {
                    return Err(short());
                }
                piece[done..done + n].copy_from_slice(&self.staging.bytes(n)[..n]);
                done += n;
            }
            offset += piece.len() as u64;
        }
        Ok(())
    }

    /// Writes `data` at `offset`.
    pub fn write(&mut self, mut offset: u64, data: &[u8]) -> io::Result<()> {
        for piece in data.chunks(CHUNK) {
            let mut done = 0;
            while done < piece.len() {
                let len = piece.len() - done;
                self.staging.bytes(len).copy_from_slice(&piece[done..]);
                let iov = self.staging.list(len);
                let at = offset + done as u64;
                let n = self.run(IoOp::Write { offset: at, iov })?.min(len);
                if n == 0 {
                    return Err(short());
                }
                done += n;
            }
            offset += piece.len() as u64;
        }
        Ok(())
    }

    /// Zeroes `[offset, offset + len)`, deallocating it if `unmap`.
    pub fn write_zeroes(&mut self, offset: u64, len: u64, unmap: bool) -> io::Result<()> {
        self.run(IoOp::WriteZeroes { offset, len, unmap }).map(drop)
    }

    /// Deallocates `[offset, offset + len)`.
    pub fn discard(&mut self, offset: u64, len: u64) -> io::Result<()> {
        self.run(IoOp::Discard { offset, len }).map(drop)
    }

    /// Makes every completed write durable.
    pub fn flush(&mut self) -> io::Result<()> {
        self.run(IoOp::Flush).map(drop)
    }
}
