//! Fault injection for tests (`delay-us=`, `delay-every=`): every Nth completion of a queue is
//! held for a while, so requests complete out of order, as on a device with a slow region. With
//! a process killed while such a request is held, what a restart must resubmit is not a prefix
//! of the ring.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::{Disk, Engine, EngineOptions, IoOp, Layer};
use crate::timer::Timer;

/// The layer whose engines hold chosen completions.
pub struct Delay {
    delay: Duration,
    every: u64,
}

impl Delay {
    /// Holds every `every`th completion of each queue for `delay`.
    pub fn new(delay: Duration, every: u64) -> Self {
        Delay {
            delay,
            every: every.max(1),
        }
    }
}

impl Layer for Delay {
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        let inner = below.engine(options)?;
        let wake = match inner.completion_fd() {
            Some(fd) => Some(Wake::new(fd)?),
            None => None,
        };
        Ok(Box::new(DelayedEngine {
            inner,
            delay: self.delay,
            every: self.every,
            completed: 0,
            held: VecDeque::new(),
            wake,
        }))
    }
}

/// What wakes a sleeping worker: the inner engine's completions or a held one's deadline, both
/// behind one epoll descriptor.
struct Wake {
    epoll: OwnedFd,
    timer: Timer,
    inner: RawFd,
}

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

impl Wake {
    fn new(inner: RawFd) -> io::Result<Self> {
        // SAFETY: plain descriptor-creating calls; each result is owned at once.
        let epoll =
            unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC))?) };
        let timer = Timer::new()?;
        // The inner eventfd is read here from now on, never blocking.
        // SAFETY: F_GETFL/F_SETFL on a descriptor the inner engine keeps open.
        unsafe {
            let flags = check(libc::fcntl(inner, libc::F_GETFL))?;
            check(libc::fcntl(inner, libc::F_SETFL, flags | libc::O_NONBLOCK))?;
        }
        for fd in [inner, timer.fd()] {
            let mut event = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 0,
            };
            // SAFETY: adds an open descriptor to an epoll instance this struct owns.
            check(unsafe {
                libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event)
            })?;
        }
        Ok(Wake {
            epoll,
            timer,
            inner,
        })
    }

    /// Clears both sources; they become readable again on the next completion or deadline.
    fn clear(&self) {
        let mut value = 0u64;
        // SAFETY: reads 8 bytes into a u64 from a non-blocking eventfd.
        let _ = unsafe { libc::read(self.inner, (&raw mut value).cast(), 8) };
        self.timer.clear();
    }

    /// Fires once after `after`.
    fn arm(&self, after: Duration) {
        self.timer.arm(after);
    }
}

struct DelayedEngine {
    inner: Box<dyn Engine>,
    delay: Duration,
    every: u64,
    completed: u64,
    /// Held completions, in the order their deadlines come.
    held: VecDeque<(Instant, u64, i32)>,
    wake: Option<Wake>,
}

impl Engine for DelayedEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        self.inner.push(op, tag)
    }

    fn submit(&mut self) -> io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        if let Some(&(deadline, _, _)) = self.held.front() {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            return Ok(());
        }
        self.inner.wait()
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        if let Some(wake) = &self.wake {
            wake.clear();
        }
        let (delay, every) = (self.delay, self.every);
        let (completed, held) = (&mut self.completed, &mut self.held);
        self.inner.reap(&mut |tag, result| {
            *completed += 1;
            if *completed % every == 0 {
                held.push_back((Instant::now() + delay, tag, result));
            } else {
                done(tag, result);
            }
        });
        let now = Instant::now();
        while let Some(&(deadline, tag, result)) = self.held.front() {
            if deadline > now {
                if let Some(wake) = &self.wake {
                    wake.arm(deadline - now);
                }
                break;
            }
            self.held.pop_front();
            done(tag, result);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.wake.as_ref().map(|wake| wake.epoll.as_raw_fd())
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.guest_memory(regions) }
    }
}
