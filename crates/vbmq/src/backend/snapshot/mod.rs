//! `vbmq ctl snapshot`: a disk's contents at one instant, written into a file the operator
//! opened, while the guest keeps writing.
//!
//! [`SnapshotDisk`] sits directly above the storage of every `path=` disk (a file, a block
//! device, a thin disk or a qcow2 disk, read through its tables: its snapshot is the guest's
//! bytes, raw), below encryption and the cache: a snapshot of an encrypted disk holds its
//! ciphertext, as its image does. Two methods:
//!
//! - **reflink**: a plain image file on a file system that clones (XFS, btrfs) is synced and
//!   cloned whole into the file (`FICLONE`), which those file systems do atomically against
//!   the image's writes.
//! - **copy** (copy-before-write) everywhere else: the snapshot's instant is when a flag the
//!   queues' engines read is raised. From then on, a write, write-zeroes or discard to a block
//!   not yet copied is held while the queue's own engine reads that block's contents (io_uring,
//!   `O_DIRECT` where the disk uses it, inline on tmpfs; adjacent blocks in one read); once they are in the file,
//!   the operation goes on (`engine.rs`). The queue's thread never waits for a copy: other
//!   requests proceed, and a write to a block being copied is held until it is. A bitmap of
//!   copied blocks is checked first; a block is claimed by one copier at a time. The control
//!   thread copies every other block in order. Reads never copy.
//!
//! What the file holds: every write acknowledged before the instant (so everything a guest
//! flush acknowledged before it covered), none issued after it; a write in flight at the
//! instant may or may not be there, as after a power loss. One snapshot at a time per disk, and
//! no resize during one.
//!
//! Cost when no snapshot runs: one acquire load of an atomic flag per operation pushed; no
//! system call. During a copy, the first write to each block waits for that block's read
//! (of [`COPY_BLOCK`] bytes, or of the thin disk's block) and its store into the file; its
//! queue's thread goes on serving meanwhile.

mod claims;
mod engine;
#[cfg(test)]
mod engine_tests;
mod fleece;
mod reflink;
mod session;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::engine::SaveFirstEngine;
pub use self::fleece::Fleece;
use self::session::{CopyFirst, Session, Source};
use super::{Disk, Engine, EngineOptions, FileDisk, Geometry, Qcow2Disk, ThinDisk};

/// Bytes copied at a time from a file image: the unit of copy-before-write (a guest write
/// is held for the copy of the 64 KiB around it; the background copy takes 16 at a time).
pub const COPY_BLOCK: u64 = 64 << 10;

/// How a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotMethod {
    /// The image was cloned (`FICLONE`).
    Reflink,
    /// Copy-before-write.
    Copy,
}

impl SnapshotMethod {
    /// Its name in `ctl`'s answer.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotMethod::Reflink => "reflink",
            SnapshotMethod::Copy => "copy",
        }
    }
}

/// What a finished snapshot reports.
#[derive(Clone, Copy, Debug)]
pub struct SnapshotReport {
    /// How it was taken.
    pub method: SnapshotMethod,
    /// Bytes of the snapshot (the disk's capacity at the instant).
    pub bytes: u64,
    /// Blocks a guest write had to copy first (copy only).
    pub copied_before_write: u64,
    /// From the request to the file synced.
    pub duration: Duration,
}

/// What the queues' engines share with the disk.
pub(crate) struct Shared {
    /// Raised at a copy's or an export's instant, lowered once it ends: the engines' only
    /// look on their path.
    active: AtomicBool,
    /// Counts the sessions begun, so that an engine keeps the current one without a lock.
    generation: AtomicU64,
    session: Mutex<Option<Arc<dyn CopyFirst>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The running copy or export, if any.
    fn session(&self) -> Option<Arc<dyn CopyFirst>> {
        lock(&self.session).clone()
    }

    /// From now on (the instant), every write pushed saves its blocks into `session` first.
    fn begin(&self, session: Arc<dyn CopyFirst>) {
        *lock(&self.session) = Some(session);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.active.store(true, Ordering::SeqCst);
    }

    fn end(&self) {
        self.active.store(false, Ordering::Release);
        lock(&self.session).take();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// A disk that can be snapshotted while it serves.
pub struct SnapshotDisk {
    inner: Arc<dyn Disk>,
    source: Arc<Source>,
    shared: Arc<Shared>,
    /// A snapshot, an export or a resize is under way: one at a time.
    busy: AtomicBool,
    /// The running export.
    export: Mutex<Option<Arc<Fleece>>>,
}

/// Clears `busy` when dropped.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.into())
}

/// Refuses a snapshot file that is not a regular file open for writing (nor appending).
fn check_target(to: &File) -> io::Result<()> {
    if !to.metadata()?.is_file() {
        return Err(invalid("the snapshot file is not a regular file"));
    }
    // SAFETY: F_GETFL reads the descriptor's flags.
    let flags = unsafe { libc::fcntl(to.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_ACCMODE == libc::O_RDONLY {
        return Err(invalid("the snapshot file is not open for writing"));
    }
    if flags & libc::O_APPEND != 0 {
        return Err(invalid("the snapshot file is open for appending"));
    }
    Ok(())
}

impl SnapshotDisk {
    /// Over a raw image file or block device.
    pub fn over_file(disk: FileDisk) -> io::Result<Self> {
        let file = disk.file()?;
        let regular = file.metadata()?.is_file();
        Ok(Self::over(Arc::new(disk), Source::File { file, regular }))
    }

    /// Over a thin disk (read through its map).
    pub fn over_thin(disk: ThinDisk) -> io::Result<Self> {
        let reader = disk.reader()?;
        Ok(Self::over(Arc::new(disk), Source::Thin(reader)))
    }

    /// Over a qcow2 disk (read through its tables: a snapshot or an export holds the guest's
    /// bytes, raw).
    pub fn over_qcow2(disk: Qcow2Disk) -> io::Result<Self> {
        let reader = disk.reader()?;
        Ok(Self::over(Arc::new(disk), Source::Qcow2(reader)))
    }

    fn over(inner: Arc<dyn Disk>, source: Source) -> Self {
        SnapshotDisk {
            inner,
            source: Arc::new(source),
            shared: Arc::new(Shared {
                active: AtomicBool::new(false),
                generation: AtomicU64::new(0),
                session: Mutex::new(None),
            }),
            busy: AtomicBool::new(false),
            export: Mutex::new(None),
        }
    }

    fn take_busy(&self, what: &str) -> io::Result<Busy<'_>> {
        self.busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| Busy(&self.busy))
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!("{what}: a snapshot, an export or a resize of this disk is under way"),
                )
            })
    }

    /// Refuses the disk's own image (or base) as the snapshot file.
    fn check_not_image(&self, to: &File) -> io::Result<()> {
        let target = to.metadata()?;
        for file in self.source.files() {
            let image = file.metadata()?;
            if (image.dev(), image.ino()) == (target.dev(), target.ino()) {
                return Err(invalid("the snapshot file is the disk's own image"));
            }
        }
        Ok(())
    }

    /// Copy-before-write of the whole disk into `to`.
    fn copy(&self, to: File, capacity: u64) -> io::Result<u64> {
        to.set_len(0)?;
        to.set_len(capacity)?;
        let block = self.source.block_size().unwrap_or(COPY_BLOCK);
        let session = Arc::new(Session::new(self.source.clone(), to, block, capacity));
        // The instant: every write pushed from now on copies its blocks first.
        self.shared.begin(session.clone());
        let copied = session.copy_all();
        self.shared.end();
        copied?;
        session.finish()
    }
}

impl SnapshotDisk {
    /// Begins the export of the disk as it is now, saving into `scratch` (a regular file
    /// open for reading and writing, not the image), and holds the disk's one place for a
    /// snapshot, export or resize until [`SnapshotDisk::end_export`].
    pub fn begin_export(&self, scratch: File) -> io::Result<Arc<Fleece>> {
        check_target(&scratch)?;
        // SAFETY: F_GETFL reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(scratch.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
            return Err(invalid(
                "the scratch file is not open for reading and writing",
            ));
        }
        self.check_not_image(&scratch)?;
        let busy = self.take_busy("export")?;
        let capacity = self.inner.geometry().capacity;
        scratch.set_len(0)?;
        scratch.set_len(capacity)?;
        let block = self.source.block_size().unwrap_or(COPY_BLOCK);
        let fleece = Arc::new(Fleece::new(self.source.clone(), scratch, block, capacity));
        *lock(&self.export) = Some(fleece.clone());
        self.shared.begin(fleece.clone());
        // Held until the export ends.
        std::mem::forget(busy);
        Ok(fleece)
    }

    /// Ends the running export (none: nothing): writes no longer save, the scratch's
    /// space is freed, and the disk may be snapshotted, exported or resized again.
    pub fn end_export(&self) {
        let Some(fleece) = lock(&self.export).take() else {
            return;
        };
        self.shared.end();
        fleece.end();
        self.busy.store(false, Ordering::Release);
    }
}

impl Disk for SnapshotDisk {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(SaveFirstEngine::new(
            self.inner.engine(options)?,
            self.shared.clone(),
        )?))
    }

    fn supports_discard(&self) -> bool {
        self.inner.supports_discard()
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.inner.stats()
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        let _busy = self.take_busy("resize")?;
        self.inner.resize(bytes, shrink)
    }

    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        self.inner.on_resize(listener);
    }

    fn image_bitmaps(&self) -> Option<Arc<dyn super::changes::ImageBitmaps>> {
        self.inner.image_bitmaps()
    }

    fn close(&self) {
        self.inner.close();
    }
}

impl SnapshotDisk {
    /// Writes the disk's contents at one instant into `to` (opened writable by the operator)
    /// while the guest keeps writing, and returns once `to` is complete and synced.
    pub fn snapshot(&self, to: File) -> io::Result<SnapshotReport> {
        let start = Instant::now();
        check_target(&to)?;
        self.check_not_image(&to)?;
        let _busy = self.take_busy("snapshot")?;
        let capacity = self.inner.geometry().capacity;
        if let Source::File {
            file,
            regular: true,
        } = self.source.as_ref()
            && reflink::clone(file, &to, capacity)?
        {
            return Ok(SnapshotReport {
                method: SnapshotMethod::Reflink,
                bytes: capacity,
                copied_before_write: 0,
                duration: start.elapsed(),
            });
        }
        let copied_before_write = self.copy(to, capacity)?;
        Ok(SnapshotReport {
            method: SnapshotMethod::Copy,
            bytes: capacity,
            copied_before_write,
            duration: start.elapsed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_size;

    fn disk(dir: &std::path::Path) -> (SnapshotDisk, std::path::PathBuf) {
        let path = dir.join("a.raw");
        let bytes: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, bytes).unwrap();
        let file = FileDisk::open(&path, false, false).unwrap();
        (SnapshotDisk::over_file(file).unwrap(), path)
    }

    #[test]
    fn one_snapshot_or_resize_at_a_time() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (disk, _) = disk(dir.path());
        let to = || File::create(dir.path().join("s.raw")).unwrap();
        let busy = disk.take_busy("test").unwrap();
        let e = disk.snapshot(to()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        let e = disk.resize(4 << 20, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        drop(busy);
        let report = disk.snapshot(to()).unwrap();
        assert_eq!(report.bytes, 3 << 20);
        assert_eq!(disk.resize(4 << 20, false).unwrap(), 4 << 20);
    }

    #[test]
    fn an_export_reads_the_instant_saves_before_writes_and_refuses_what_was_trimmed() {
        use crate::nbd::Export;
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (disk, path) = disk(dir.path());
        let before = std::fs::read(&path).unwrap();
        let scratch = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("scratch"))
            .unwrap();
        let fleece = disk.begin_export(scratch).unwrap();
        let e = disk.resize(4 << 20, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        // A guest write across blocks 1 and 2, as a queue's hook makes it.
        let session = disk.shared.session().unwrap();
        let self::claims::Claimed::Runs(runs) = session.claim(COPY_BLOCK + 100, COPY_BLOCK) else {
            panic!("nothing else saves");
        };
        assert_eq!(runs, [(1, 2)], "one run of the two blocks");
        let (offset, len) = session.run_bytes(1, 2);
        let mut old = vec![0; host_size(len)];
        disk.source.read_at(&mut old, offset).unwrap();
        session.saved(1, 2, &old);
        let image = File::options().write(true).open(&path).unwrap();
        image
            .write_all_at(&vec![0xEE; 64 << 10], COPY_BLOCK + 100)
            .unwrap();
        assert_eq!(fleece.saved_blocks(), 2);
        let mut read = vec![0; 3 << 20];
        fleece.read(0, &mut read).unwrap();
        assert!(read == before, "the export is the disk at its instant");
        fleece.trim(0, 2 * COPY_BLOCK).unwrap();
        let mut one = [0; 1];
        assert_eq!(
            fleece.read(COPY_BLOCK, &mut one),
            Err(crate::nbd::wire::errno::EPERM)
        );
        fleece.read(2 * COPY_BLOCK, &mut one).unwrap();
        assert_eq!(one[0], before[host_size(2 * COPY_BLOCK)]);
        disk.end_export();
        assert!(disk.shared.session().is_none());
        assert_eq!(disk.resize(4 << 20, false).unwrap(), 4 << 20);
    }

    #[test]
    fn a_quiet_copy_is_the_image_and_a_stale_longer_file_is_cut() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let (disk, path) = disk(dir.path());
        let target = dir.path().join("s.raw");
        std::fs::write(&target, vec![7u8; 5 << 20]).unwrap();
        let to = File::options().write(true).open(&target).unwrap();
        let report = disk.snapshot(to).unwrap();
        // tmpfs cannot clone.
        assert_eq!(report.method, SnapshotMethod::Copy);
        assert!(std::fs::read(&target).unwrap() == std::fs::read(&path).unwrap());
    }
}
