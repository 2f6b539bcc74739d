//! CPU pinning and naming of the calling thread.

use std::io;

/// The CPUs this process may run on.
pub fn online_cpus() -> Vec<usize> {
    let mut set = std::mem::MaybeUninit::<libc::cpu_set_t>::zeroed();
    // SAFETY: sched_getaffinity fills the set it is given, of the size it is told.
    let ret = unsafe {
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set.as_mut_ptr())
    };
    if ret != 0 {
        return Vec::new();
    }
    // SAFETY: zero-initialised and filled by the kernel.
    let set = unsafe { set.assume_init() };
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set is valid for its size.
    let ret = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Names the calling thread (as `top -H` and `/proc/*/task/*/comm` show it); at most 15 bytes.
pub fn name_current_thread(name: &str) {
    let mut bytes = [0u8; 16];
    let n = name.len().min(15);
    bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from `bytes`.
    unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr()) };
}
