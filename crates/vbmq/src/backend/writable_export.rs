//! A disk served writable to NBD clients (`export-begin --writable`): the destination of a
//! mirror, before any guest runs on it. Every operation goes through the disk's stack from the
//! level a mirror sends from (an engine of its own per client at work): under the cipher of an
//! `encrypt=` disk, so the ciphertext a mirror sends is stored as it is, and above
//! `track-changes=on`, which marks it as for a guest's writes.
//!
//! One client at a time: a mirror's destination cut off while it was stopped still holds, in
//! its socket, writes of the cut connection; served beside the connection of a resumed
//! mirror, they could land after the resumed copy of their chunks. The next client is taken
//! once the last one's connection is over, every request it sent answered or dropped.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Disk;
use super::engine_io::EngineIo;
use crate::nbd::Export;
use crate::nbd::wire::errno;

/// A disk that NBD clients write.
pub struct WritableExport {
    disk: Arc<dyn Disk>,
    /// Engines not in use: one is taken for each operation, so clients on threads of their own
    /// never share one.
    idle: Mutex<Vec<EngineIo>>,
    /// Set when a guest starts: from then on, every operation is refused.
    ended: AtomicBool,
    /// A client is in transmission.
    attached: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `NBD_E*` value of an I/O error.
fn nbd_error(e: &io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc::EINVAL) => errno::EINVAL,
        Some(libc::EOPNOTSUPP) => errno::ENOTSUP,
        Some(libc::EPERM | libc::EROFS | libc::EACCES) => errno::EPERM,
        _ => errno::EIO,
    }
}

impl WritableExport {
    /// Serves `disk`; one engine is opened now, so that a disk that cannot make one is refused
    /// at once.
    pub fn new(disk: Arc<dyn Disk>) -> io::Result<Self> {
        let first = EngineIo::new(disk.as_ref())?;
        Ok(WritableExport {
            disk,
            idle: Mutex::new(vec![first]),
            ended: AtomicBool::new(false),
            attached: AtomicBool::new(false),
        })
    }

    /// Refuses every operation from now on (a guest starts on the disk).
    pub fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }

    /// Runs `f` on an idle engine (a new one if none is idle).
    fn with_engine(&self, f: impl FnOnce(&mut EngineIo) -> io::Result<()>) -> Result<(), u32> {
        if self.ended.load(Ordering::SeqCst) {
            return Err(errno::EPERM);
        }
        let taken = lock(&self.idle).pop();
        let mut io = match taken {
            Some(io) => io,
            None => EngineIo::new(self.disk.as_ref()).map_err(|e| {
                crate::limited!(warn, "writable export: no engine: {e}");
                errno::EIO
            })?,
        };
        let result = f(&mut io);
        lock(&self.idle).push(io);
        result.map_err(|e| {
            crate::limited!(warn, "writable export: {e}");
            nbd_error(&e)
        })
    }
}

impl Export for WritableExport {
    fn size(&self) -> u64 {
        self.disk.geometry().capacity
    }

    fn block_size(&self) -> u32 {
        self.disk.geometry().block_size
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), u32> {
        self.with_engine(|io| io.read(offset, buf))
    }

    /// A discard, where the disk has them (a trim is only advice: elsewhere, nothing).
    fn trim(&self, offset: u64, len: u64) -> Result<(), u32> {
        if !self.disk.supports_discard() {
            return Ok(());
        }
        self.with_engine(|io| io.discard(offset, len))
    }

    /// Every byte is data: a mirror's destination is written whole.
    fn allocation(&self, _offset: u64, len: u64, _max: usize) -> Result<Vec<(u32, u32)>, u32> {
        let len = u32::try_from(len.min(1 << 30)).unwrap_or(1 << 30);
        Ok(vec![(len, 0)])
    }

    fn writable(&self) -> bool {
        true
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), u32> {
        self.with_engine(|io| io.write(offset, data))
    }

    fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<(), u32> {
        if self.disk.supports_discard() {
            return self.with_engine(|io| io.write_zeroes(offset, len, unmap));
        }
        let zeros = vec![0u8; super::engine_io::CHUNK];
        self.with_engine(|io| {
            let mut at = offset;
            let end = offset + len;
            while at < end {
                let n = (end - at).min(zeros.len() as u64);
                io.write(at, &zeros[..crate::host_size(n)])?;
                at += n;
            }
            Ok(())
        })
    }

    fn flush(&self) -> Result<(), u32> {
        self.with_engine(EngineIo::flush)
    }

    fn attach(&self) -> Result<(), &'static str> {
        self.attached
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(drop)
            .map_err(|_| {
                "this writable export takes one client at a time: another is connected (try \
                 again once it is gone)"
            })
    }

    fn detach(&self) {
        self.attached.store(false, Ordering::SeqCst);
    }
}
