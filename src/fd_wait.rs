//! Waiting, with a deadline, for a socket the daemon serves to become readable or writable.

use std::os::fd::RawFd;
use std::time::Duration;

/// Waits at most `left` for `events` (`POLLIN`, `POLLOUT`) on `fd`.
pub fn wait(fd: RawFd, events: libc::c_short, left: Duration) {
    let mut pollfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: polls one descriptor the caller keeps open, through a local pollfd.
    unsafe { libc::poll(&mut pollfd, 1, ms) };
}
