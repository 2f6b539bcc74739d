//! Guest memory in a memfd, one region from guest address 0, as a frontend shares it.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};

use vhost::VhostUserMemoryRegionInfo;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion};

/// Memory the driver and the backend both map.
pub struct GuestRam {
    file: File,
    /// The driver's mapping.
    pub mem: GuestMemoryMmap<()>,
}

impl GuestRam {
    /// `size` bytes of zeroed shared memory.
    pub fn new(size: usize) -> io::Result<Self> {
        // SAFETY: a NUL-terminated name and valid flags; the descriptor is owned by the File.
        let fd = unsafe { libc::memfd_create(c"vbmq-driver".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size as u64)?;
        let region = (
            GuestAddress(0),
            size,
            Some(FileOffset::new(file.try_clone()?, 0)),
        );
        let mem = GuestMemoryMmap::from_ranges_with_files([region])
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(GuestRam { file, mem })
    }

    /// Cuts the memory file to `len` bytes (the mappings stay; accesses past `len` fault).
    pub fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// The SET_MEM_TABLE description of this memory.
    pub fn regions(&self) -> Vec<VhostUserMemoryRegionInfo> {
        self.mem
            .iter()
            .map(|region| VhostUserMemoryRegionInfo {
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: self.host_addr(region.start_addr().0),
                mmap_offset: 0,
                mmap_handle: self.file.as_raw_fd(),
            })
            .collect()
    }

    /// The driver's virtual address of `gpa` (vring addresses are given this way); 0 outside.
    pub fn host_addr(&self, gpa: u64) -> u64 {
        self.mem
            .get_host_address(GuestAddress(gpa))
            .map_or(0, |p| p as u64)
    }
}
