//! Surviving guest memory that shrinks under vbmq.
//!
//! A frontend shares guest memory as files (memfds, files on /dev/shm or hugetlbfs). A file that
//! cannot be sealed against shrinking can be truncated after `SET_MEM_TABLE`; the next access to
//! a page past the new end raises SIGBUS, which would kill the process and every disk it serves.
//! Where `F_SEAL_SHRINK` holds (vbmq adds it where the memfd allows) nothing can happen. The
//! other regions are registered here, and a SIGBUS handler that finds the faulting address in a
//! registered region replaces the whole region with private zero pages (the access then
//! completes on them) and marks its connection broken: the connection is closed by its queue
//! thread, and the other disks never notice. A fault anywhere else gets the default action.
//! Accesses the kernel makes into such memory (io_uring, preadv) fail with EFAULT instead: the
//! request gets IOERR.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use super::GuestMemory;
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// Unsealed regions that may be registered at once, for the whole process.
const SLOTS: usize = 1024;

struct Slot {
    /// Host address of the region; 0 when the slot is free.
    start: AtomicUsize,
    end: AtomicUsize,
    /// The connection's broken flag (an `AtomicBool` kept alive by its registration).
    broken: AtomicPtr<AtomicBool>,
}

static REGISTRY: [Slot; SLOTS] = [const {
    Slot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        broken: AtomicPtr::new(std::ptr::null_mut()),
    }
}; SLOTS];

/// The unsealed regions of one connection's memory tables; unregistered on drop, which must
/// come before the mappings are unmapped.
pub struct Registration {
    slots: Vec<usize>,
    _broken: Arc<AtomicBool>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        for &i in &self.slots {
            REGISTRY[i].start.store(0, Ordering::Release);
        }
    }
}

/// Whether `file` is sealed against shrinking.
fn sealed(file: &std::fs::File) -> bool {
    // SAFETY: F_GET_SEALS on a descriptor we hold; it fails harmlessly on files without seals.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// Registers every region of `map` whose file could shrink, with `broken` as the flag a fault
/// in them sets. Fails if the registry is full (the memory table is then refused).
pub fn register(map: &GuestMemory, broken: &Arc<AtomicBool>) -> io::Result<Registration> {
    let mut registration = Registration {
        slots: Vec::new(),
        _broken: broken.clone(),
    };
    for region in map.iter() {
        let Some(file_offset) = region.file_offset() else {
            continue;
        };
        if sealed(file_offset.file()) {
            continue;
        }
        let Ok(len) = usize::try_from(region.len()) else {
            continue;
        };
        registration
            .slots
            .push(claim(region.as_ptr() as usize, len, broken)?);
    }
    Ok(registration)
}

/// Registers a mapping of `len` bytes at `start` that the frontend could shrink (the dirty log,
/// whose file vbmq never sees): a fault in it gets zero pages, and sets a flag no one reads.
pub fn register_range(start: *const u8, len: usize) -> io::Result<Registration> {
    let broken = Arc::new(AtomicBool::new(false));
    let slot = claim(start as usize, len, &broken)?;
    Ok(Registration {
        slots: vec![slot],
        _broken: broken,
    })
}

/// Takes a free slot for `[start, start + len)`.
fn claim(start: usize, len: usize, broken: &Arc<AtomicBool>) -> io::Result<usize> {
    let slot = (0..SLOTS).find(|&i| {
        REGISTRY[i]
            .start
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    let Some(i) = slot else {
        return Err(io::Error::other("too many unsealed guest memory regions"));
    };
    // Reserved with an impossible start; published last, so the handler never sees a
    // half-written slot.
    REGISTRY[i].end.store(start + len, Ordering::Release);
    REGISTRY[i]
        .broken
        .store(Arc::as_ptr(broken).cast_mut(), Ordering::Release);
    REGISTRY[i].start.store(start, Ordering::Release);
    Ok(i)
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
    // SAFETY: the kernel passes a valid siginfo_t for SIGBUS (SA_SIGINFO).
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &REGISTRY {
        let start = slot.start.load(Ordering::Acquire);
        if start == 0 || start == usize::MAX || addr < start {
            continue;
        }
        let end = slot.end.load(Ordering::Acquire);
        if addr >= end {
            continue;
        }
        // SAFETY: [start, end) is a guest-memory mapping of a live registration (unregistered
        // before it is unmapped): replacing it with private zero pages changes only what that
        // connection's guest memory reads as. The region's start and length are aligned as its
        // mapping was (huge pages included).
        let replaced = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                end - start,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced == libc::MAP_FAILED {
            break;
        }
        let broken = slot.broken.load(Ordering::Acquire);
        // SAFETY: the registration holding this slot keeps the flag alive.
        if let Some(broken) = unsafe { broken.as_ref() } {
            broken.store(true, Ordering::Release);
        }
        return;
    }
    // Not guest memory: the default action, when the access is retried.
    // SAFETY: restores the default disposition; async-signal-safe.
    unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
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

    #[test]
    fn only_memory_that_can_shrink_is_registered() {
        let broken = Arc::new(AtomicBool::new(false));
        let sealed = memory(libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING, true);
        assert!(register(&sealed, &broken).unwrap().slots.is_empty());
        let unsealable = memory(libc::MFD_CLOEXEC, false);
        let registration = register(&unsealable, &broken).unwrap();
        assert_eq!(registration.slots.len(), 1);
        let slot = &REGISTRY[registration.slots[0]];
        let start = slot.start.load(Ordering::Acquire);
        assert_eq!(slot.end.load(Ordering::Acquire) - start, 1 << 20);
        drop(registration);
        assert_eq!(
            slot.start.load(Ordering::Acquire),
            0,
            "unregistered on drop"
        );
    }
}
