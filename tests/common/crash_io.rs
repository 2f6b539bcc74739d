//! Requests to a daemon that may be killed at any instant: each answer, or `None` where the
//! daemon died before it answered; the killer, and the kill tests' seeded randomness.

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use blkio::{Completion, ReqFlags};

use super::{Client, Daemon};

/// A thread that sends SIGKILL to a process after a delay, then raises `killed`.
pub struct Killer {
    pub killed: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Killer {
    /// Kills `pid` (a daemon the test started) after `delay`.
    pub fn after(pid: u32, delay: Duration) -> Killer {
        let killed = Arc::new(AtomicBool::new(false));
        let flag = killed.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(delay);
            // SAFETY: a signal to the daemon this test started.
            unsafe { libc::kill(pid.cast_signed(), libc::SIGKILL) };
            flag.store(true, Ordering::SeqCst);
        });
        Killer { killed, thread }
    }

    /// Starts vbmq on `spec`, connects to `socket` and kills vbmq after `delay`: the daemon
    /// (reaped by the test), its client and the killer.
    pub fn start_doomed(spec: &str, socket: &Path, delay: Duration) -> (Daemon, Client, Killer) {
        let daemon = Daemon::start(&[spec.to_string()]);
        let client = Client::connect(socket, 1, false).expect("connect");
        let killer = Killer::after(daemon.child.id(), delay);
        (daemon, client, killer)
    }

    /// Waits until the kill was sent.
    pub fn join(self) {
        self.thread.join().unwrap();
    }
}

/// A seed from the clock, printed so that a failing run can be replayed.
pub fn clock_seed() -> u64 {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("seed {seed}");
    seed
}

/// Writes each `(offset, data)` at once (at most 16, 64 KiB each); the result of each.
pub fn try_writes(
    client: &mut Client,
    batch: &[(u64, Vec<u8>)],
    killed: &AtomicBool,
) -> Vec<Option<i32>> {
    let buf = client.region.addr as *mut u8;
    for (i, (offset, data)) in batch.iter().enumerate() {
        assert!(i < 16 && data.len() <= 64 << 10);
        // SAFETY: the region holds BUF_LEN >= 16 * 64 KiB bytes.
        let at = unsafe { buf.add(i * (64 << 10)) };
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
        client.queues[0].write(*offset, at, data.len(), i, ReqFlags::empty());
    }
    let mut results = vec![None; batch.len()];
    let mut done = [const { MaybeUninit::<Completion>::uninit() }; 16];
    let mut pending = batch.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pending > 0 {
        assert!(
            Instant::now() < deadline,
            "writes never answered by a live daemon"
        );
        let mut timeout = Duration::from_millis(50);
        match client.queues[0].do_io(&mut done, 1, Some(&mut timeout), None) {
            Ok(n) => {
                for c in &done[..n] {
                    // SAFETY: do_io initialised `n` completions.
                    let c = unsafe { c.assume_init_ref() };
                    results[c.user_data] = Some(c.ret);
                    pending -= 1;
                }
                if n == 0 && killed.load(Ordering::SeqCst) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    results
}

/// A flush; `None` if the daemon died before it answered.
pub fn try_flush(client: &mut Client, killed: &AtomicBool) -> Option<i32> {
    client.queues[0].flush(0, ReqFlags::empty());
    let mut done = [MaybeUninit::<Completion>::uninit(); 1];
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut timeout = Duration::from_millis(50);
        match client.queues[0].do_io(&mut done, 1, Some(&mut timeout), None) {
            // SAFETY: do_io initialised one completion.
            Ok(1) => return Some(unsafe { done[0].assume_init_ref() }.ret),
            Ok(_) if !killed.load(Ordering::SeqCst) => {}
            _ => return None,
        }
    }
    panic!("a flush was never answered by a live daemon");
}

/// Where the kill tests write next: sectors in units (blocks, clusters) never written yet, where
/// the order of data and metadata matters, and now and then anywhere.
pub struct Sectors {
    /// Units never written, in no order.
    pub fresh: Vec<usize>,
    pub per_unit: usize,
    pub count: usize,
    /// One write in this many goes anywhere.
    pub anywhere: u64,
}

impl Sectors {
    /// 16 writes to distinct sectors: each `(sector, seq)`, numbered on from `seq`.
    pub fn batch(&mut self, rng: &mut Rng, seq: &mut u64) -> Vec<(usize, u64)> {
        let mut batch: Vec<(usize, u64)> = Vec::new();
        while batch.len() < 16 {
            let sector = if self.fresh.is_empty() || rng.next(self.anywhere) == 0 {
                rng.next(self.count as u64) as usize
            } else {
                let i = rng.next(self.fresh.len() as u64) as usize;
                self.fresh.swap_remove(i) * self.per_unit + rng.next(self.per_unit as u64) as usize
            };
            if batch.iter().all(|(s, _)| *s != sector) {
                *seq += 1;
                batch.push((sector, *seq));
            }
        }
        batch
    }
}

/// A small xorshift generator: the test's randomness, seeded by the clock (printed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}
