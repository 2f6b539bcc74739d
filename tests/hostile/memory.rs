//! Guest memory: one memfd shared with vbmq, mapped as two guest regions that are contiguous in
//! guest-physical space but not in the file, followed by unmapped space.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};

use vhost::VhostUserMemoryRegionInfo;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
};

/// Region 0: rings, tables, headers and data buffers.
pub const REGION0_SIZE: u64 = 4 << 20;
/// Region 1 starts where region 0 ends, backed by a different part of the memfd.
pub const REGION1_GPA: u64 = REGION0_SIZE;
pub const REGION1_SIZE: u64 = 1 << 20;
const REGION1_FILE_OFFSET: u64 = 8 << 20;
const MEMFD_SIZE: u64 = REGION1_FILE_OFFSET + REGION1_SIZE;
/// First guest address that no region maps.
pub const MEMORY_END: u64 = REGION1_GPA + REGION1_SIZE;

pub type Mem = GuestMemoryMmap<()>;

pub struct GuestRam {
    pub file: File,
    pub mem: Mem,
}

/// A memory table entry: `size` bytes of guest memory at `gpa`, mapped by the frontend at `va`,
/// at `offset` in the file `fd`.
pub fn region(gpa: u64, size: u64, va: u64, offset: u64, fd: i32) -> VhostUserMemoryRegionInfo {
    VhostUserMemoryRegionInfo {
        guest_phys_addr: gpa,
        memory_size: size,
        userspace_addr: va,
        mmap_offset: offset,
        mmap_handle: fd,
    }
}

pub fn memfd(name: &std::ffi::CStr, size: u64) -> File {
    // SAFETY: a NUL-terminated name and valid flags; the returned fd is owned by the File.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).unwrap();
    file
}

impl GuestRam {
    pub fn new() -> Self {
        let file = memfd(c"vbmq-hostile-guest", MEMFD_SIZE);
        let ranges = [
            (
                GuestAddress(0),
                REGION0_SIZE as usize,
                Some(FileOffset::new(file.try_clone().unwrap(), 0)),
            ),
            (
                GuestAddress(REGION1_GPA),
                REGION1_SIZE as usize,
                Some(FileOffset::new(
                    file.try_clone().unwrap(),
                    REGION1_FILE_OFFSET,
                )),
            ),
        ];
        let mem = GuestMemoryMmap::from_ranges_with_files(ranges).unwrap();
        GuestRam { file, mem }
    }

    /// One region of `size` bytes at guest address 0, a memfd of its own (sparse: only the
    /// pages touched cost memory).
    pub fn single(name: &std::ffi::CStr, size: u64) -> Self {
        let file = memfd(name, size);
        let ranges = [(
            GuestAddress(0),
            size as usize,
            Some(FileOffset::new(file.try_clone().unwrap(), 0)),
        )];
        let mem = GuestMemoryMmap::from_ranges_with_files(ranges).unwrap();
        GuestRam { file, mem }
    }

    /// The SET_MEM_TABLE description of this memory.
    pub fn regions(&self) -> Vec<VhostUserMemoryRegionInfo> {
        let offsets = [0, REGION1_FILE_OFFSET];
        self.mem
            .iter()
            .zip(offsets)
            .map(|(region, mmap_offset)| VhostUserMemoryRegionInfo {
                guest_phys_addr: region.start_addr().0,
                memory_size: region.len(),
                userspace_addr: self.host_addr(region.start_addr().0),
                mmap_offset,
                mmap_handle: self.file.as_raw_fd(),
            })
            .collect()
    }

    /// The frontend's virtual address of `gpa` (vring addresses are given this way).
    pub fn host_addr(&self, gpa: u64) -> u64 {
        self.mem.get_host_address(GuestAddress(gpa)).unwrap() as u64
    }

    pub fn write(&self, gpa: u64, bytes: &[u8]) {
        self.mem.write_slice(bytes, GuestAddress(gpa)).unwrap();
    }

    pub fn read(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.mem.read_slice(&mut buf, GuestAddress(gpa)).unwrap();
        buf
    }

    /// The byte every poisoned address holds, so stray writes are visible.
    pub fn poison_byte(gpa: u64) -> u8 {
        0xc3 ^ (gpa >> 9) as u8 ^ (gpa as u8).rotate_left(3)
    }

    pub fn poison(&self, start: u64, end: u64) {
        let bytes: Vec<u8> = (start..end).map(Self::poison_byte).collect();
        self.write(start, &bytes);
    }

    /// Addresses in `[start, start + before.len())` that changed since `before` was read and
    /// that `allowed` (device-writable ranges) does not cover.
    pub fn stray_writes(&self, start: u64, before: &[u8], allowed: &[(u64, u64)]) -> Vec<u64> {
        let now = self.read(start, before.len());
        (start..)
            .zip(before.iter().zip(now))
            .filter(|&(_, (was, is))| *was != is)
            .map(|(gpa, _)| gpa)
            .filter(|gpa| !allowed.iter().any(|&(a, len)| *gpa >= a && *gpa - a < len))
            .take(8)
            .collect()
    }
}
