//! The alignment `O_DIRECT` needs on a file: not always 512. A file system on a 4096-byte-sector
//! device refuses every 512-byte direct access with EINVAL. The kernel says what it needs
//! through `statx(STATX_DIOALIGN)` (Linux 6.1 and later, on the file systems that implement it);
//! elsewhere it is probed, as QEMU does, with direct reads of growing size.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// The largest alignment vbmq looks for: a page.
const MAX_ALIGN: usize = 4096;

/// The offset, length and buffer alignment direct I/O on `file` (open with `O_DIRECT`) needs.
pub fn direct_alignment(file: &File) -> usize {
    statx_alignment(file).unwrap_or_else(|| probed_alignment(file))
}

fn statx_alignment(file: &File) -> Option<usize> {
    // SAFETY: an all-zero statx is a valid value for the kernel to fill.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx on an open descriptor with AT_EMPTY_PATH and an empty path fills `stx`.
    let ret = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if ret != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 || stx.stx_dio_offset_align == 0 {
        return None;
    }
    let align = stx.stx_dio_offset_align.max(stx.stx_dio_mem_align);
    usize::try_from(align).ok().filter(|a| a.is_power_of_two())
}

/// The smallest size, from 512 up to a page, that a direct read at offset 0 into a page-aligned
/// buffer accepts (EINVAL means too small); a page if none does.
fn probed_alignment(file: &File) -> usize {
    let Ok(layout) = std::alloc::Layout::from_size_align(MAX_ALIGN, MAX_ALIGN) else {
        return MAX_ALIGN;
    };
    // SAFETY: the layout has a non-zero size.
    let buffer = unsafe { std::alloc::alloc(layout) };
    if buffer.is_null() {
        return MAX_ALIGN;
    }
    let mut size = 512;
    while size < MAX_ALIGN {
        // SAFETY: reads at most `size` <= MAX_ALIGN bytes into the buffer allocated above.
        let ret = unsafe { libc::pread(file.as_raw_fd(), buffer.cast(), size, 0) };
        if ret >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            break;
        }
        size *= 2;
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buffer, layout) };
    size
}
