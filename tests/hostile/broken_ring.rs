//! A ring broken by its driver or its frontend, held broken for seconds: the queue must stop at
//! once (nothing more taken, one line said, no thread spinning on it, other disks served). A ring
//! the driver broke also ends the connection, so that the frontend notices and resets the
//! device (vhost-user has no `DEVICE_NEEDS_RESET`): the next frontend is served. A ring the
//! frontend broke is served again once the frontend sets it up anew.

use std::time::{Duration, Instant};

use vhost::VhostBackend;

use super::battery::good_request;
use super::daemon::{Daemon, QUEUE_SIZE, TARGET_SIZE, VICTIM_SIZE, pattern};
use super::frontend::Guest;
use super::victim::Victim;

/// How long the ring is held broken, with the guest kicking all the while.
const HOLD: Duration = Duration::from_secs(3);
/// More log than this from a broken ring is a flood.
const LOG_BOUND: u64 = 64 << 10;
/// CPU time vbmq may spend while its only running queue is broken (a thread spinning on it
/// spends all of `HOLD`).
const CPU_BOUND: Duration = Duration::from_millis(600);

/// How a ring gets broken.
#[derive(Clone, Copy, Debug)]
pub enum Breakage {
    /// The guest publishes an avail index further ahead than the ring holds.
    AvailPastTheRing,
    /// The frontend sends a memory table whose first region ends inside the ring.
    MemoryShrunkUnderTheRing,
}

/// vbmq's user plus system CPU time, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    // utime and stime: fields 14 and 15 of stat, 12 and 13 after the name and the state.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis(ticks * 1000 / hz)
}

/// Breaks queue 0 of a disk in `mode`, holds it broken, then resets it.
pub fn hold_then_reset(mode: &str, breakage: Breakage) -> Result<(), String> {
    let what = format!("{mode}, {breakage:?}");
    // Polling threads must be pinned; the second queue is never started, so never spins.
    let cpus = if mode == "poll" { ",cpus=0-1" } else { "" };
    let opts = format!(",mode={mode}{cpus}");
    let daemon = Daemon::start_logging(&format!("broken-{mode}-{breakage:?}"), &opts, "debug");
    let log_len = || {
        std::fs::metadata(daemon.path("vbmq.log"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let mut victim = Victim::connect(&daemon.path("victim.sock"), pattern(VICTIM_SIZE, 3));
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE)
        .map_err(|e| format!("{what}: connect: {e}"))?;
    let mut model = pattern(TARGET_SIZE, 1);
    good_request(&mut guest, &mut model, 0)?;
    std::thread::sleep(Duration::from_millis(200));
    let log_before = log_len();
    let cpu_before = cpu_time(daemon.pid());

    let next = guest.used_idx();
    match breakage {
        Breakage::AvailPastTheRing => guest.publish_avail_idx(next.wrapping_add(QUEUE_SIZE + 1)),
        Breakage::MemoryShrunkUnderTheRing => {
            // The descriptor table (4 KiB at 0) stays; the avail and used rings after it go.
            let mut regions = guest.ram.regions();
            regions[0].memory_size = 4096;
            guest.want_acks(true);
            guest
                .frontend
                .set_mem_table(&regions)
                .map_err(|e| format!("{what}: SET_MEM_TABLE: {e}"))?;
            guest.want_acks(false);
            guest.publish_avail_idx(next.wrapping_add(1));
        }
    }
    let start = Instant::now();
    while start.elapsed() < HOLD {
        guest.kick();
        std::thread::sleep(Duration::from_millis(1));
    }
    let cpu = cpu_time(daemon.pid()).saturating_sub(cpu_before);
    let grown = log_len() - log_before;
    let said = match breakage {
        Breakage::AvailPastTheRing => "queue stopped, closing the connection",
        Breakage::MemoryShrunkUnderTheRing => "queue stopped until the frontend sets it up again",
    };
    let stopped = daemon.log().matches(said).count();
    if grown > LOG_BOUND {
        return Err(format!("{what}: the log grew by {grown} bytes"));
    }
    if cpu > CPU_BOUND {
        return Err(format!(
            "{what}: vbmq spent {cpu:?} of CPU on a broken queue"
        ));
    }
    if stopped != 1 {
        return Err(format!(
            "{what}: said {stopped} times that the queue stopped"
        ));
    }
    if let Breakage::AvailPastTheRing = breakage {
        if !guest.closed_by_vbmq(Duration::from_secs(1)) {
            return Err(format!(
                "{what}: the queue stopped but the connection stayed open: the frontend \
                 cannot know it must reset the device"
            ));
        }
        victim
            .check()
            .map_err(|e| format!("{what}: the other disk: {e}"))?;
        drop(guest);
        let mut next = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE)
            .map_err(|e| format!("{what}: the next frontend: {e}"))?;
        for round in 1..20 {
            good_request(&mut next, &mut model, round)
                .map_err(|e| format!("{what}: the next frontend: {e}"))?;
        }
        return check_after_reset(&what, &daemon, &mut victim, &model);
    }
    victim
        .check()
        .map_err(|e| format!("{what}: the other disk: {e}"))?;

    // The frontend resets the ring: stops it, then sets memory and the ring up again.
    guest.want_acks(true);
    guest
        .frontend
        .get_vring_base(0)
        .map_err(|e| format!("{what}: GET_VRING_BASE: {e}"))?;
    guest
        .frontend
        .set_mem_table(&guest.ram.regions())
        .map_err(|e| format!("{what}: SET_MEM_TABLE: {e}"))?;
    guest
        .start_queue(0, QUEUE_SIZE)
        .map_err(|e| format!("{what}: setting the ring up again: {e}"))?;
    guest.want_acks(false);
    for round in 1..20 {
        good_request(&mut guest, &mut model, round)
            .map_err(|e| format!("{what}: after the reset: {e}"))?;
    }
    check_after_reset(&what, &daemon, &mut victim, &model)
}

/// The other disk still serves, and the attacked one holds what was written to it.
fn check_after_reset(
    what: &str,
    daemon: &Daemon,
    victim: &mut Victim,
    model: &[u8],
) -> Result<(), String> {
    victim
        .check()
        .map_err(|e| format!("{what}: the other disk: {e}"))?;
    if std::fs::read(daemon.path("target.img")).map_err(|e| e.to_string())? != model {
        return Err(format!("{what}: the disk does not hold what was written"));
    }
    Ok(())
}
