//! Passing a descriptor to a child process (`#[path]`-included by the tests that do).

use std::process::Command;

/// Lets the child of `command` inherit `fd`: close-on-exec is cleared in the child only, after
/// the fork, so that no other test thread's child inherits it meanwhile.
pub fn inherit_fd(command: &mut Command, fd: std::os::fd::RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only calls fcntl, async-signal-safe, on a
    // descriptor the child holds.
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}
