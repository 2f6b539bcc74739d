//! CPU pinning.

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
