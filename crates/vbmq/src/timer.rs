//! Time: a monotonic clock in nanoseconds, and a one-shot timer a thread can sleep on with its
//! other descriptors (a timerfd): what wakes a queue held back by its I/O limits, or the delay
//! test knob's held completions.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds on a monotonic clock (from the first call in the process).
pub fn now_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    u64::try_from(BASE.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A timerfd, disarmed until [`Timer::arm`].
pub struct Timer(OwnedFd);

impl Timer {
    /// A disarmed timer.
    pub fn new() -> io::Result<Self> {
        // SAFETY: creates a descriptor, owned at once.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is new and owned by nothing else.
        Ok(Timer(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Fires once after `after` (at least a nanosecond: zero would disarm it).
    pub fn arm(&self, after: Duration) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(after.subsec_nanos().max(1)),
            },
        };
        // SAFETY: arms a timerfd this struct owns with a valid itimerspec.
        let _ =
            unsafe { libc::timerfd_settime(self.0.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    /// Clears an expiry that woke the thread.
    pub fn clear(&self) {
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a u64 from a non-blocking timerfd.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&raw mut value).cast(), 8) };
    }

    /// The descriptor to wait on.
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
