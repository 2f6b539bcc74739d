//! Checking a frontend's memory table before any queue may use it.
//!
//! `vhost-user-backend` maps each region with the offset and size the frontend sends, without
//! asking whether its file is that large. A mapping past the end of its file raises SIGBUS on
//! first touch, which would kill the process and every disk it serves. Each region's file must
//! back all of it; the table may hold at most [`MAX_REGIONS`] regions (what the crate advertises
//! in `GET_MAX_MEM_SLOTS`, and does not enforce).

use crate::host_size;
use std::io;
use std::os::fd::AsRawFd;

use super::{GuestMemory, MAX_REGIONS};
use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

/// Why a memory table was refused.
fn refused(reason: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, reason)
}

/// Checks `map`; on failure, first makes every region safe to touch (the part its file does
/// not back becomes anonymous zero pages), because the crate has already published the map.
pub fn check(map: &GuestMemory) -> io::Result<()> {
    if map.num_regions() > MAX_REGIONS {
        return Err(refused(format!("more than {MAX_REGIONS} memory regions")));
    }
    let mut result = Ok(());
    for region in map.iter() {
        let Some(file_offset) = region.file_offset() else {
            continue;
        };
        let file = file_offset.file();
        let file_len = file.metadata()?.len();
        let len = region.len();
        let end = file_offset.start().checked_add(len);
        if end.is_some_and(|end| end <= file_len) {
            forbid_shrinking(file);
            continue;
        }
        let backed = file_len.saturating_sub(file_offset.start()).min(len);
        let page = 4096;
        let backed = backed - backed % page;
        // SAFETY: [as_ptr + backed, as_ptr + len) lies inside this region's own mapping, which
        // the region owns until it is dropped (its munmap then covers the replacement too).
        // Replacing it with private anonymous memory only removes the SIGBUS: no queue has
        // been given this map yet.
        let replaced = unsafe {
            libc::mmap(
                region.as_ptr().add(host_size(backed)).cast(),
                host_size(len - backed),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        result = Err(refused(format!(
            "region at {:#x}: {len} bytes from offset {} of a {file_len}-byte file",
            region.start_addr().0,
            file_offset.start()
        )));
    }
    result
}

/// Seals a memfd against shrinking, where it allows it, so the frontend cannot later truncate
/// what is mapped. Other files (and memfds that do not allow sealing) are left as they are.
fn forbid_shrinking(file: &std::fs::File) {
    // SAFETY: F_ADD_SEALS on a descriptor we hold; it fails harmlessly on other files.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
}
