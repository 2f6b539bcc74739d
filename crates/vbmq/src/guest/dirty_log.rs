//! Dirty page logging for live migration (`VHOST_F_LOG_ALL`, `VHOST_USER_PROTOCOL_F_LOG_SHMFD`).
//!
//! While a VM migrates, its frontend copies guest memory again and again, each time only the
//! pages written since the last copy. The pages a backend writes (data of reads, status bytes,
//! used rings) are invisible to the frontend, so the backend marks them in a bitmap the
//! frontend shares (`SET_LOG_BASE`): one bit per 4 KiB page of guest-physical address space.
//!
//! Every guest memory region carries a [`DirtyLog`]. Writes made through `vm-memory` (status
//! bytes, used ring) mark it themselves; writes the kernel makes into guest buffers (io_uring
//! reads) and the engines' copies are marked by the worker with [`mark_host_range`] after the
//! completion and before the used entry is published. A share's FUSE replies are written through
//! `fuse-backend-rs`'s writer, whose slices of guest memory carry this bitmap: it marks the bytes
//! each write (or `preadv` into the reply) filled. Logging is on only between a
//! `SET_FEATURES` with `VHOST_F_LOG_ALL` and one without (a finished or cancelled migration):
//! while off, marking costs one load of a flag that never changes.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use arc_swap::ArcSwapOption;

use super::GuestMemory;
use super::memory_faults;
use vhost_user_backend::bitmap::{BitmapReplace, MemRegionBitmap, MmapLogReg};
use vm_memory::bitmap::{Bitmap, RefSlice, WithBitmapSlice};
use vm_memory::mmap::NewBitmap;
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryRegion};

/// Size of a page in the log (`VHOST_LOG_PAGE`).
const LOG_PAGE: usize = 0x1000;

/// The frontend's log, as seen from one region: the bits of the region's pages.
/// (`Debug` by hand: the registration has nothing to show.)
pub struct RegionLog {
    /// Dropped before `log` can unmap (fields drop in order); shared by the regions that log
    /// to the same log.
    _faults: Arc<memory_faults::Guard>,
    log: Arc<MmapLogReg>,
    /// Guest-physical page number of the region's first byte.
    first_page: usize,
    /// Pages in the region.
    pages: usize,
}

impl std::fmt::Debug for RegionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegionLog")
            .field("first_page", &self.first_page)
            .field("pages", &self.pages)
            .finish_non_exhaustive()
    }
}

impl MemRegionBitmap for RegionLog {
    fn new<R: GuestMemoryRegion>(region: &R, log: Arc<MmapLogReg>) -> io::Result<Self> {
        let invalid = || io::Error::from(io::ErrorKind::InvalidData);
        let start = usize::try_from(region.start_addr().raw_value()).map_err(|_| invalid())?;
        let len = usize::try_from(region.len()).map_err(|_| invalid())?;
        let last = start
            .checked_add(len)
            .and_then(|end| end.checked_sub(1))
            .ok_or_else(invalid)?;
        // The log covers guest-physical addresses from 0: it must reach the region's last page.
        if last / LOG_PAGE / 8 >= log.len() {
            return Err(invalid());
        }
        // The frontend's file is never seen here: it may shrink under the mapping, and a mark
        // would then raise SIGBUS (see `memory_faults`).
        let faults = log_guard(&raw const log[0] as *const u8, log.len())?;
        Ok(RegionLog {
            _faults: faults,
            log,
            first_page: start / LOG_PAGE,
            pages: last / LOG_PAGE - start / LOG_PAGE + 1,
        })
    }
}

/// The guard of the log mapped at `start`: one per log, however many regions log to it. A live
/// guard names a live log (each holder holds the log too), so equal ranges are the same log.
fn log_guard(start: *const u8, len: usize) -> io::Result<Arc<memory_faults::Guard>> {
    type Guards = Vec<(usize, usize, Weak<memory_faults::Guard>)>;
    static GUARDS: Mutex<Guards> = Mutex::new(Vec::new());
    let mut guards = GUARDS.lock().unwrap_or_else(PoisonError::into_inner);
    guards.retain(|(_, _, guard)| guard.strong_count() > 0);
    let start = start as usize;
    let live = guards
        .iter()
        .filter(|&&(at, size, _)| at == start && size == len)
        .find_map(|(_, _, guard)| guard.upgrade());
    if let Some(guard) = live {
        return Ok(guard);
    }
    let guard = Arc::new(memory_faults::guard_range(start as *const u8, len)?);
    guards.push((start, len, Arc::downgrade(&guard)));
    Ok(guard)
}

impl RegionLog {
    /// Marks the pages of `[offset, offset + len)`, an offset into the region.
    fn mark(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let first = offset / LOG_PAGE;
        let last = (offset.saturating_add(len - 1) / LOG_PAGE).min(self.pages.saturating_sub(1));
        for page in first..=last {
            let page = self.first_page + page;
            // `new` checked that the region's last page has its byte in the log.
            self.log[page / 8].fetch_or(1 << (page % 8), Ordering::Relaxed);
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Logging is on (the frontend acked `VHOST_F_LOG_ALL`).
    on: AtomicBool,
    /// The log the frontend gave last.
    log: ArcSwapOption<RegionLog>,
}

/// One region's dirty log: a `vm-memory` bitmap whose backing the frontend gives at run time.
/// It also holds the region's fault guard, the one object of vbmq's that a region owns:
/// vm-memory drops a region's bitmap before it unmaps the region.
#[derive(Debug, Default)]
pub struct DirtyLog {
    state: Arc<State>,
    /// Set once the region is checked, if it can fault (see [`memory_faults`]).
    fault_guard: OnceLock<memory_faults::Guard>,
}

impl Clone for DirtyLog {
    /// The same log; the guard stays with the region.
    fn clone(&self) -> Self {
        DirtyLog {
            state: self.state.clone(),
            fault_guard: OnceLock::new(),
        }
    }
}

impl DirtyLog {
    /// Turns marking on or off.
    pub fn set_logging(&self, on: bool) {
        self.state.on.store(on, Ordering::SeqCst);
    }

    /// Whether marking is on.
    pub fn logging(&self) -> bool {
        self.state.on.load(Ordering::Acquire)
    }

    /// The log memory this region writes to, if the frontend gave one.
    pub fn log_memory(&self) -> Option<Arc<MmapLogReg>> {
        self.state.log.load().as_ref().map(|log| log.log.clone())
    }

    /// Whether the frontend gave this region a log.
    pub fn has_log(&self) -> bool {
        self.state.log.load().is_some()
    }
}

impl Bitmap for DirtyLog {
    #[inline]
    fn mark_dirty(&self, offset: usize, len: usize) {
        if !self.state.on.load(Ordering::Acquire) {
            return;
        }
        if let Some(log) = self.state.log.load().as_ref() {
            log.mark(offset, len);
        }
    }

    fn dirty_at(&self, offset: usize) -> bool {
        let guard = self.state.log.load();
        let Some(log) = guard.as_ref() else {
            return false;
        };
        let page = offset / LOG_PAGE;
        if page >= log.pages {
            return false;
        }
        let page = log.first_page + page;
        log.log[page / 8].load(Ordering::Relaxed) & (1 << (page % 8)) != 0
    }

    fn slice_at(&self, offset: usize) -> RefSlice<'_, Self> {
        RefSlice::new(self, offset)
    }
}

impl<'a> WithBitmapSlice<'a> for DirtyLog {
    type S = RefSlice<'a, Self>;
}

impl NewBitmap for DirtyLog {
    fn with_len(_len: usize) -> Self {
        Self::default()
    }
}

impl BitmapReplace for DirtyLog {
    type InnerBitmap = RegionLog;

    fn replace(&self, log: RegionLog) {
        self.state.log.store(Some(Arc::new(log)));
    }
}

/// Turns marking on or off in every region of `mem`.
pub fn set_logging(mem: &GuestMemory, on: bool) {
    for region in mem.iter() {
        region.bitmap_state().set_logging(on);
    }
}

/// Gives the regions of `mem` that have no log the one `other` regions use (a memory table
/// changed while a migration logs: the frontend does not send the log again).
pub fn inherit_log(mem: &GuestMemory, log: &Arc<MmapLogReg>) -> io::Result<()> {
    for region in mem.iter() {
        let state = region.bitmap_state();
        if !state.has_log() {
            state.replace(RegionLog::new(region, log.clone())?);
        }
    }
    Ok(())
}

/// Carries logging over to a new memory table `new` replacing `old`: regions without a log
/// take the one `old` logs to (the frontend does not send it again), and marking is `on` or
/// off in every region.
pub fn carry_over(old: &GuestMemory, new: &GuestMemory, on: bool) {
    if let Some(log) = log_memory(old)
        && let Err(e) = inherit_log(new, &log)
    {
        crate::limited!(
            warn,
            "the dirty log does not cover the new memory table: {e}"
        );
    }
    set_logging(new, on);
}

/// The log memory of any region of `mem`.
pub fn log_memory(mem: &GuestMemory) -> Option<Arc<MmapLogReg>> {
    mem.iter()
        .find_map(|region| region.bitmap_state().log_memory())
}

/// Fault injection for tests: with `VBMQ_FAULT_UNLOGGED_READS=1` in its environment, vbmq does
/// not mark the buffers of reads (a migration test must then see stale data in the guest).
pub fn reads_unlogged() -> bool {
    static UNLOGGED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *UNLOGGED
        .get_or_init(|| std::env::var_os("VBMQ_FAULT_UNLOGGED_READS").is_some_and(|v| v == "1"))
}

/// Marks the guest pages under host addresses `[ptr, ptr + len)`, which lie in one region of
/// `mem` (a buffer the request parser translated).
pub fn mark_host_range(mem: &GuestMemory, ptr: *const u8, len: usize) {
    let addr = ptr as usize;
    for region in mem.iter() {
        let start = region.as_ptr() as usize;
        let size = usize::try_from(region.len()).unwrap_or(0);
        if addr >= start && addr - start < size {
            region.bitmap_state().mark_dirty(addr - start, len);
            return;
        }
    }
}

/// Gives every region of `mem` a log in `file` (one bit per page of guest-physical memory from
/// 0, as a frontend's) and turns marking on: what `SET_LOG_BASE` and `VHOST_F_LOG_ALL` do, for
/// benchmarks and tests without a frontend.
#[cfg(feature = "test-utils")]
pub fn log_to(mem: &GuestMemory, file: &std::fs::File) -> io::Result<()> {
    use std::os::fd::AsFd;
    let len = file.metadata()?.len();
    let log = Arc::new(MmapLogReg::from_file(file.as_fd(), 0, len)?);
    inherit_log(mem, &log)?;
    set_logging(mem, true);
    Ok(())
}

/// A region's fault guard is kept in its dirty log (see [`memory_faults`]).
impl memory_faults::GuardSlot for vm_memory::GuestRegionMmap<DirtyLog> {
    fn fault_guard(&self) -> &OnceLock<memory_faults::Guard> {
        &self.bitmap_state().fault_guard
    }
}

/// The region's own [`DirtyLog`] (not a slice of it).
trait BitmapState {
    fn bitmap_state(&self) -> &DirtyLog;
}

impl BitmapState for vm_memory::GuestRegionMmap<DirtyLog> {
    fn bitmap_state(&self) -> &DirtyLog {
        // The mapping's bitmap, through `Deref` to the `MmapRegion`.
        (**self).bitmap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use vm_memory::GuestAddress;

    #[test]
    fn regions_that_log_to_one_log_share_one_fault_guard() {
        let mem = GuestMemory::from_ranges(&[
            (GuestAddress(0), 0x10000),
            (GuestAddress(0x10000), 0x10000),
        ])
        .unwrap();
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let log = Arc::new(MmapLogReg::from_file(file.as_fd(), 0, 4096).unwrap());
        inherit_log(&mem, &log).unwrap();
        let guards: Vec<_> = mem
            .iter()
            .map(|region| region.bitmap_state().state.log.load_full().unwrap())
            .collect();
        assert!(Arc::ptr_eq(&guards[0]._faults, &guards[1]._faults));
        // A log mapped anew gets a guard of its own.
        let other = Arc::new(MmapLogReg::from_file(file.as_fd(), 0, 4096).unwrap());
        let region = mem.iter().next().unwrap();
        let mine = RegionLog::new(region, other).unwrap();
        assert!(!Arc::ptr_eq(&mine._faults, &guards[0]._faults));
    }
}
