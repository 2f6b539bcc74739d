//! Surviving guest memory that faults under vbmq.
//!
//! A frontend shares guest memory as files (memfds, files on /dev/shm or hugetlbfs). A file that
//! cannot be sealed against shrinking can be truncated after `SET_MEM_TABLE`, and a hugetlbfs
//! file faults when no huge page is left for it, sealed or not: the next access raises SIGBUS,
//! which would kill the process and every disk it serves. Where `F_SEAL_SHRINK` holds on an
//! ordinary memfd nothing can happen. Every other file-backed region gets a [`Guard`], and a
//! SIGBUS handler that finds the faulting address in a guarded region replaces the whole region
//! with private zero pages (the access then completes on them) and marks its connection broken:
//! the connection is closed by its queue thread, and the other disks never notice. A fault
//! anywhere else gets the default action. Accesses the kernel makes into such memory (io_uring,
//! preadv) fail with EFAULT instead: the request gets IOERR.
//!
//! A guard lives in its region's bitmap ([`DirtyLog`](super::dirty_log::DirtyLog)), which
//! vm-memory drops before it unmaps the region (PATCHES.md): the handler never knows an address
//! range that is no longer that region, however long requests keep an old memory table alive.
//! A connection holds at most [`PER_CONNECTION`] guards, so one frontend cannot take the
//! process's [`SLOTS`] from the others.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence};
use std::sync::{Arc, OnceLock};

use super::{GuestMemory, MAX_REGIONS};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// Guarded regions for the whole process.
const SLOTS: usize = 8192;

/// Guarded regions one connection may hold: a full table of its own and a replacing
/// `SET_MEM_TABLE` (8 regions) while the old one is still mapped.
pub const PER_CONNECTION: usize = MAX_REGIONS + 8;

/// `statfs.f_type` of hugetlbfs.
const HUGETLBFS_MAGIC: libc::c_long = 0x9584_58f6;

/// One guarded mapping, as the signal handler reads it: a sequence lock (no lock a faulting
/// thread could hold), written by the one owner of the slot.
struct Slot {
    /// Even when the fields are stable, odd while they are written.
    seq: AtomicUsize,
    /// Held by the guard that owns the slot.
    taken: AtomicBool,
    /// Host address range of the region; `start` 0 when the slot is free.
    start: AtomicUsize,
    end: AtomicUsize,
    /// The connection's broken flag (kept alive by the guard's [`Owner`]).
    broken: AtomicPtr<AtomicBool>,
}

impl Slot {
    /// Publishes new fields (only the slot's owner calls this).
    fn publish(&self, start: usize, end: usize, broken: *mut AtomicBool) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.start.store(start, Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
        self.broken.store(broken, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The fields as one owner published them, or `None` when the slot is free (or is being
    /// written for longer than the handler waits: a slot is written only as its region is
    /// mapped or unmapped, never while an access can fault in it).
    fn read(&self) -> Option<(usize, usize, *mut AtomicBool)> {
        for _ in 0..1000 {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let start = self.start.load(Ordering::Relaxed);
            let end = self.end.load(Ordering::Relaxed);
            let broken = self.broken.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                return (start != 0 && start < end).then_some((start, end, broken));
            }
        }
        None
    }
}

impl Slot {
    const fn free() -> Self {
        Slot {
            seq: AtomicUsize::new(0),
            taken: AtomicBool::new(false),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            broken: AtomicPtr::new(std::ptr::null_mut()),
        }
    }
}

static REGISTRY: [Slot; SLOTS] = [const { Slot::free() }; SLOTS];

/// What a connection's guards share: the flag a fault sets, and how many guards it holds.
#[derive(Debug)]
pub struct Owner {
    broken: Arc<AtomicBool>,
    guards: AtomicUsize,
}

impl Owner {
    /// An owner whose faults set `broken`.
    pub fn new(broken: Arc<AtomicBool>) -> Arc<Self> {
        Arc::new(Owner {
            broken,
            guards: AtomicUsize::new(0),
        })
    }

    /// Guards held now.
    pub fn guards(&self) -> usize {
        self.guards.load(Ordering::Acquire)
    }
}

/// One guarded mapping. Dropped before the mapping is unmapped: from then on a fault there
/// gets the default action.
pub struct Guard {
    slot: usize,
    owner: Arc<Owner>,
}

/// Where a mapped region keeps its guard (in its dirty log: [`super::dirty_log`]).
pub trait GuardSlot {
    /// The region's guard, set once it is guarded.
    fn fault_guard(&self) -> &OnceLock<Guard>;
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("slot", &self.slot).finish()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let slot = &REGISTRY[self.slot];
        slot.publish(0, 0, std::ptr::null_mut());
        slot.taken.store(false, Ordering::Release);
        self.owner.guards.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a mapping of `file` can raise SIGBUS: it can shrink (no `F_SEAL_SHRINK`), or it
/// lives on hugetlbfs, where a sealed file faults as well when no huge page is left. Asked
/// after vbmq sealed what it could.
fn can_fault(file: &std::fs::File) -> bool {
    // SAFETY: F_GET_SEALS on a descriptor we hold; it fails harmlessly on files without seals.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    let sealed = seals >= 0 && seals & libc::F_SEAL_SHRINK != 0;
    // Unknown file systems are guarded.
    !sealed || on_hugetlbfs(file) != Some(false)
}

/// Whether `file` lives on hugetlbfs (`None`: cannot tell).
pub(super) fn on_hugetlbfs(file: &std::fs::File) -> Option<bool> {
    // SAFETY: a zeroed statfs is a valid buffer for fstatfs to fill.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs on a descriptor we hold, into our own buffer.
    let stat = unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) };
    (stat == 0).then_some(fs.f_type as libc::c_long == HUGETLBFS_MAGIC)
}

/// Guards every region of `map` that can fault and has no guard yet (an ADD_MEM_REG table
/// shares the others with the table before it), with `owner`'s flag. Fails when the owner or
/// the process holds as many guards as it may (the memory table is then refused).
pub fn guard(map: &GuestMemory, owner: &Arc<Owner>) -> io::Result<()> {
    for region in map.iter() {
        let Some(file_offset) = region.file_offset() else {
            continue;
        };
        let slot = region.fault_guard();
        if slot.get().is_some() || !can_fault(file_offset.file()) {
            continue;
        }
        let len = usize::try_from(region.len())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // Tables are changed one message at a time: nobody else sets this region's guard.
        let _ = slot.set(claim(region.as_ptr() as usize, len, owner)?);
    }
    Ok(())
}

/// Guards a mapping of `len` bytes at `start` that the frontend could shrink (the dirty log,
/// whose file vbmq never sees): a fault in it gets zero pages, and sets a flag no one reads.
pub fn guard_range(start: *const u8, len: usize) -> io::Result<Guard> {
    claim(start as usize, len, &Owner::new(Arc::default()))
}

/// Takes a free slot for `[start, start + len)`.
fn claim(start: usize, len: usize, owner: &Arc<Owner>) -> io::Result<Guard> {
    let end = start
        .checked_add(len)
        .filter(|&end| start != 0 && end > start)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    if owner.guards.fetch_add(1, Ordering::AcqRel) >= PER_CONNECTION {
        owner.guards.fetch_sub(1, Ordering::AcqRel);
        return Err(io::Error::other(format!(
            "more than {PER_CONNECTION} guest memory regions that can fault"
        )));
    }
    let taken = (0..SLOTS).find(|&i| {
        REGISTRY[i]
            .taken
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    let Some(slot) = taken else {
        owner.guards.fetch_sub(1, Ordering::AcqRel);
        return Err(io::Error::other(
            "no guard left for guest memory regions that can fault, in the whole process",
        ));
    };
    REGISTRY[slot].publish(start, end, Arc::as_ptr(&owner.broken).cast_mut());
    Ok(Guard {
        slot,
        owner: owner.clone(),
    })
}

/// Installs the SIGBUS handler (once, before confinement and before any connection).
pub fn install_handler() -> io::Result<()> {
    // SAFETY: a zeroed sigaction is "no flags, empty mask"; the handler only calls
    // async-signal-safe code (atomics, mmap, sigaction).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: errno of the interrupted thread, restored before returning.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t for SIGBUS (SA_SIGINFO).
    let addr = unsafe { (*info).si_addr() } as usize;
    let mut handled = false;
    for slot in &REGISTRY {
        let Some((start, end, broken)) = slot.read() else {
            continue;
        };
        if addr < start || addr >= end {
            continue;
        }
        // SAFETY: [start, end) is a guarded region's mapping: its guard is dropped before it
        // is unmapped, and the faulting thread holds the region while it accesses it, so it is
        // still that mapping. Private zero pages change only what that connection's guest
        // memory reads as. Start and length are aligned as the mapping was (huge pages too);
        // no reservation, as the region's own mapping had none.
        let replaced = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if replaced != libc::MAP_FAILED {
            // SAFETY: the guard's owner keeps the flag alive while the slot names it.
            if let Some(broken) = unsafe { broken.as_ref() } {
                broken.store(true, Ordering::Release);
            }
            handled = true;
        }
        break;
    }
    if !handled {
        // Not guest memory: the default action, when the access is retried.
        // SAFETY: restores the default disposition; async-signal-safe.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::FromRawFd;
    use vm_memory::{FileOffset, GuestAddress};

    fn memory(flags: libc::c_uint, seal: bool) -> GuestMemory {
        // SAFETY: a NUL-terminated name; the descriptor is owned by the File below.
        let fd = unsafe { libc::memfd_create(c"vbmq-test".as_ptr(), flags) };
        assert!(fd >= 0);
        // SAFETY: a fresh descriptor nobody else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(1 << 20).unwrap();
        if seal {
            // SAFETY: F_ADD_SEALS on our own memfd.
            let ret =
                unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
            assert_eq!(ret, 0);
        }
        let ranges = [(GuestAddress(0), 1 << 20, Some(FileOffset::new(file, 0)))];
        GuestMemory::from_ranges_with_files(ranges).unwrap()
    }

    fn slot_of(map: &GuestMemory) -> Option<usize> {
        let region = map.iter().next().unwrap();
        region.fault_guard().get().map(|guard| guard.slot)
    }

    #[test]
    fn only_memory_that_can_fault_is_guarded_as_long_as_it_is_mapped() {
        let owner = Owner::new(Arc::default());
        let sealed = memory(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, true);
        guard(&sealed, &owner).unwrap();
        assert_eq!(slot_of(&sealed), None);
        let unsealable = memory(libc::MFD_CLOEXEC, false);
        guard(&unsealable, &owner).unwrap();
        // A table that shares the region does not guard it twice.
        let shared = unsealable.clone();
        guard(&shared, &owner).unwrap();
        assert_eq!(owner.guards(), 1);
        let slot = &REGISTRY[slot_of(&unsealable).unwrap()];
        let (start, end, broken) = slot.read().unwrap();
        assert_eq!(end - start, 1 << 20);
        assert_eq!(broken.cast_const(), Arc::as_ptr(&owner.broken));
        drop(unsealable);
        assert!(slot.read().is_some(), "guarded while a table maps it");
        drop(shared);
        // (Other tests may take the slot at once.)
        let ours = |(_, _, flag): (usize, usize, *mut AtomicBool)| flag == broken;
        assert!(!slot.read().is_some_and(ours), "unguarded with its mapping");
        assert_eq!(owner.guards(), 0);
    }

    #[test]
    fn the_handler_never_reads_half_of_a_guard() {
        // The writer rewrites the slot until the reader has checked enough whole reads (or a
        // deadline that only bounds a starving reader): on a busy machine either thread may
        // run alone for a while, so neither counts on the other's pace.
        const READS: u32 = 200_000;
        let slot = Slot::free();
        let enough = AtomicBool::new(false);
        let (a, b) = ((0x1000, 0x3000), (0x10_0000, 0x50_0000));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut i = 0u64;
                while !enough.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
                    let (start, end) = if i.is_multiple_of(3) { a } else { b };
                    slot.publish(start, end, std::ptr::null_mut());
                    if i.is_multiple_of(7) {
                        slot.publish(0, 0, std::ptr::null_mut());
                    }
                    i += 1;
                }
            });
            // The writer stops when the reader ends, by a failed assertion too.
            struct StopWriter<'a>(&'a AtomicBool);
            impl Drop for StopWriter<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let _stop = StopWriter(&enough);
            // Whole reads that differ from the one before: the writer was at work meanwhile.
            let (mut changes, mut last) = (0, None);
            while changes < READS && std::time::Instant::now() < deadline {
                if let Some((start, end, _)) = slot.read() {
                    assert!(
                        (start, end) == a || (start, end) == b,
                        "{start:#x}..{end:#x}"
                    );
                    if last != Some((start, end)) {
                        changes += 1;
                        last = Some((start, end));
                    }
                }
            }
            assert_eq!(changes, READS, "the reader saw too few rewrites in 60 s");
        });
    }

    #[test]
    fn one_owner_holds_at_most_its_share() {
        let owner = Owner::new(Arc::default());
        let maps: Vec<_> = (0..PER_CONNECTION)
            .map(|_| {
                let map = memory(libc::MFD_CLOEXEC, false);
                guard(&map, &owner).unwrap();
                map
            })
            .collect();
        let one_more = memory(libc::MFD_CLOEXEC, false);
        assert!(guard(&one_more, &owner).is_err());
        assert_eq!(owner.guards(), PER_CONNECTION);
        // Another owner is not refused.
        guard(&one_more, &Owner::new(Arc::default())).unwrap();
        drop(maps);
        assert_eq!(owner.guards(), 0);
    }
}
