//! The file-creation mask of a thread that serves a share's requests.
//!
//! The passthrough creates each file with the guest's mode less the guest's umask; the kernel
//! then also takes away the creating thread's umask. A process-wide umask of 0 (what
//! virtiofsd, one process per share, sets) would also open every socket and lock file vbmq
//! creates to everyone: instead each queue thread gets a umask of its own, 0, and the process
//! keeps the operator's.

use std::io;

/// Gives the calling thread its own umask, 0 (`unshare(CLONE_FS)`: its own root, working
/// directory and umask, copies of the process's). On failure the thread keeps the process
/// umask, and files the guest creates get fewer permission bits than it asked for, never more.
pub fn clear_for_this_thread() -> io::Result<()> {
    // SAFETY: unshare(CLONE_FS) only detaches this thread's filesystem attributes.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: umask(2) cannot fail; it now sets this thread's umask alone.
    unsafe { libc::umask(0) };
    Ok(())
}

thread_local! {
    /// The calling thread's umask was cleared.
    static CLEARED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`clear_for_this_thread`], once per thread: a thread that serves several queues (a CPU's
/// thread) calls it before each request, cheaply. A failure is not tried again.
#[inline]
pub fn clear_once_for_this_thread() -> io::Result<()> {
    if CLEARED.get() {
        return Ok(());
    }
    CLEARED.set(true);
    clear_for_this_thread()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The umask of the calling thread, from /proc.
    fn umask_of_this_thread() -> String {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
        line["Umask:".len()..].trim().to_string()
    }

    #[test]
    fn only_the_calling_thread_loses_its_umask() {
        let process = umask_of_this_thread();
        let cleared = std::thread::spawn(|| {
            clear_for_this_thread().unwrap();
            umask_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(cleared, "0000");
        assert_eq!(umask_of_this_thread(), process);
    }
}
