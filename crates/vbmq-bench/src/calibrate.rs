//! The machine's floors for a virtual disk: how long one CPU takes to tell another that work is
//! done, by wake-up (an eventfd, as an interrupt-driven guest is told) and by a polled shared
//! cache line (as a polling guest or backend sees it). A request through a vhost-user backend
//! pays at least one of these on top of the storage itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cpus::pin_to;
use super::histogram::Histogram;

/// One-way hand-over latencies between the client CPU and the backend CPU.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Handover {
    /// Median one-way latency of an eventfd write waking a thread blocked in read, in us.
    pub wakeup_p50_us: f64,
    /// Median one-way latency of a store seen by a thread spinning on it, in us.
    pub spin_p50_us: f64,
}

impl Handover {
    /// The lower of each latency: the machine's floor over two measurements.
    pub fn min(&self, other: &Handover) -> Handover {
        Handover {
            wakeup_p50_us: self.wakeup_p50_us.min(other.wakeup_p50_us),
            spin_p50_us: self.spin_p50_us.min(other.spin_p50_us),
        }
    }
}

/// Measures both hand-overs between `a` and `b` for about `time` each.
pub fn handover(a: usize, b: usize, time: Duration) -> io::Result<Handover> {
    Ok(Handover {
        wakeup_p50_us: one_way_p50(a, b, time, Kind::Wakeup)?,
        spin_p50_us: one_way_p50(a, b, time, Kind::Spin)?,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Wakeup,
    Spin,
}

/// Ping-pong between a thread on `a` and one on `b`; half the median round trip. Both are new
/// threads, so the caller's own CPU affinity is left alone.
fn one_way_p50(a: usize, b: usize, time: Duration, kind: Kind) -> io::Result<f64> {
    let ping = eventfd()?;
    let pong = eventfd()?;
    let ball = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let rtt = thread::scope(|s| {
        let responder = s.spawn(|| -> io::Result<()> {
            let result = respond(b, kind, &ping, &pong, &ball, &stop);
            // Release the pinger if this side failed: it is blocked in read or spinning.
            stop.store(true, Ordering::Release);
            if kind == Kind::Wakeup {
                write_eventfd(&pong, 1)?;
            }
            result
        });
        let pinger = s.spawn(|| -> io::Result<Histogram> {
            let result = ping_pong(a, time, kind, &ping, &pong, &ball, &stop);
            // Release the responder whatever happened: it is blocked in read or spinning.
            stop.store(true, Ordering::Release);
            if kind == Kind::Wakeup {
                write_eventfd(&ping, 1)?;
            }
            result
        });
        let panicked = || io::Error::other("calibration thread panicked");
        let rtt = pinger.join().unwrap_or_else(|_| Err(panicked()));
        let responded = responder.join().unwrap_or_else(|_| Err(panicked()));
        responded.and(rtt)
    })?;
    rtt.quantile_us(0.5)
        .map(|rtt| rtt / 2.0)
        .ok_or_else(|| io::Error::other("no round trip completed"))
}

fn respond(
    cpu: usize,
    kind: Kind,
    ping: &OwnedFd,
    pong: &OwnedFd,
    ball: &AtomicU64,
    stop: &AtomicBool,
) -> io::Result<()> {
    pin_to(&[cpu])?;
    let mut expect = 1;
    while !stop.load(Ordering::Acquire) {
        match kind {
            Kind::Wakeup => {
                read_eventfd(ping)?;
                if !stop.load(Ordering::Acquire) {
                    write_eventfd(pong, 1)?;
                }
            }
            Kind::Spin => {
                let v = spin_until(ball, stop, |v| v >= expect);
                ball.store(v + 1, Ordering::Release);
                expect = v + 2;
            }
        }
    }
    Ok(())
}

fn ping_pong(
    cpu: usize,
    time: Duration,
    kind: Kind,
    ping: &OwnedFd,
    pong: &OwnedFd,
    ball: &AtomicU64,
    stop: &AtomicBool,
) -> io::Result<Histogram> {
    pin_to(&[cpu])?;
    let deadline = Instant::now() + time;
    let mut rtt = Histogram::default();
    let mut next = 1;
    while Instant::now() < deadline && !stop.load(Ordering::Acquire) {
        let t = Instant::now();
        match kind {
            Kind::Wakeup => {
                write_eventfd(ping, 1)?;
                read_eventfd(pong)?;
            }
            Kind::Spin => {
                ball.store(next, Ordering::Release);
                spin_until(ball, stop, |v| v == next + 1);
                next += 2;
            }
        }
        rtt.record(t.elapsed());
    }
    Ok(rtt)
}

fn spin_until(ball: &AtomicU64, stop: &AtomicBool, done: impl Fn(u64) -> bool) -> u64 {
    loop {
        let v = ball.load(Ordering::Acquire);
        if done(v) || stop.load(Ordering::Relaxed) {
            return v;
        }
        std::hint::spin_loop();
    }
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; a non-negative return is a new descriptor we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn write_eventfd(fd: &OwnedFd, value: u64) -> io::Result<()> {
    let buf = value.to_ne_bytes();
    // SAFETY: `buf` is 8 readable bytes, as an eventfd write requires.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn read_eventfd(fd: &OwnedFd) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes, as an eventfd read requires.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n != 8 {
        return Err(io::Error::last_os_error());
    }
    Ok(u64::from_ne_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpus::CpuPlan;

    #[test]
    fn measures_both_handovers() {
        let plan = CpuPlan::detect().unwrap();
        let (a, b) = (plan.client[0], plan.backend[0]);
        let h = handover(a, b, Duration::from_millis(30)).unwrap();
        assert!(h.wakeup_p50_us > 0.0 && h.wakeup_p50_us.is_finite());
        assert!(h.spin_p50_us > 0.0 && h.spin_p50_us.is_finite());
    }
}
