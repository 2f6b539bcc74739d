//! A hostile guest and a hostile frontend against a running `vbmq serve` (docs/hostile-guest.md).
//!
//! The frontend here is a test-only vhost-user driver that writes descriptor tables, rings and
//! virtio-blk headers itself. After every case: vbmq is alive, the attacked queue serves a good
//! request, a second disk driven by libblkio returns correct data, the disk file holds exactly
//! what the accepted requests wrote, and no guest byte outside device-writable buffers changed.

mod hostile {
    pub mod battery;
    pub mod broken_ring;
    pub mod chain;
    pub mod daemon;
    pub mod dirty_log;
    pub mod expect;
    pub mod framing;
    pub mod frontend;
    pub mod known_bugs;
    pub mod layouts;
    pub mod memory;
    pub mod memory_guard;
    pub mod ranges;
    pub mod raw;
    pub mod requests;
    pub mod rings;
    pub mod shrinking_memory;
    pub mod vhost;
    pub mod vhost_inflight;
    pub mod vhost_lifecycle;
    pub mod vhost_memory;
    pub mod vhost_raw;
    pub mod vhost_values;
    pub mod victim;
}

use hostile::battery::Battery;

/// Fails on any unexpected failure, and on any listed known bug that no longer fails.
fn report(name: &str, ran: usize, failures: &[String], names: &[String]) {
    let (known, unexpected): (Vec<&String>, Vec<&String>) = failures
        .iter()
        .partition(|f| hostile::known_bugs::known_bug(f).is_some());
    let fixed: Vec<&str> = hostile::known_bugs::KNOWN_BUGS
        .iter()
        .filter(|(prefix, _)| names.iter().any(|n| n.starts_with(prefix)))
        .filter(|(prefix, _)| !known.iter().any(|f| f.starts_with(prefix)))
        .filter(|(prefix, _)| !hostile::known_bugs::TIMING_DEPENDENT.contains(prefix))
        .map(|(prefix, _)| *prefix)
        .collect();
    eprintln!(
        "{name}: {ran} cases, {} known bugs, {} unexpected failures",
        known.len(),
        unexpected.len()
    );
    for failure in &known {
        eprintln!("known bug: {failure}");
    }
    assert!(
        unexpected.is_empty(),
        "{} of {ran} cases failed:\n{}",
        unexpected.len(),
        unexpected
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        fixed.is_empty(),
        "known bugs now pass, remove them from known_bugs.rs: {fixed:?}"
    );
}

/// Runs (with `run`, by index) the cases whose name contains `HOSTILE_FILTER` (all when unset;
/// for debugging), then reports them as `name`.
fn run_filtered(
    mut battery: Battery,
    name: &str,
    names: &[&str],
    run: impl Fn(&mut Battery, usize),
) {
    let filter = std::env::var("HOSTILE_FILTER").unwrap_or_default();
    let selected: Vec<usize> = (0..names.len())
        .filter(|&i| names[i].contains(&filter))
        .collect();
    for &i in &selected {
        run(&mut battery, i);
    }
    let ran = battery.ran;
    let failures = battery.finish();
    let names: Vec<String> = selected.iter().map(|&i| names[i].to_string()).collect();
    report(name, ran, &failures, &names);
}

/// Runs the request and ring cases against a battery whose attacked disk has `target_opts`.
fn request_battery(name: &str, target_opts: &str) {
    let battery = Battery::start_with(name, target_opts);
    let cases: Vec<_> = hostile::requests::cases()
        .into_iter()
        .chain(hostile::rings::cases())
        .collect();
    assert!(cases.len() >= 200, "only {} cases", cases.len());
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    run_filtered(battery, name, &names, |battery, i| battery.run(&cases[i]));
}

#[test]
fn malformed_requests_and_rings() {
    request_battery("requests", "");
}

/// The adaptive worker has its own loop (poll, then re-arm kicks): the same cases through it.
#[test]
fn malformed_requests_and_rings_adaptive_mode() {
    request_battery("requests-adaptive", ",mode=adaptive,poll-us=50");
}

#[test]
fn lying_frontend() {
    let battery = Battery::start("vhost");
    let cases = hostile::vhost::cases();
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    run_filtered(battery, "vhost-user battery", &names, |battery, i| {
        battery.run_vhost(&cases[i]);
    });
}

/// The battery's own baseline: good requests wrap the 256-entry rings several times.
/// Live migration: while logging is on, the pages of a read's data, its status byte and the
/// used ring are marked in the frontend's log; once it is off, nothing is.
#[test]
fn reads_are_marked_in_the_dirty_log_while_logging_is_on() {
    let daemon = hostile::daemon::Daemon::start("dirty-log");
    let (marks, after) =
        hostile::dirty_log::read_while_logging(&daemon.path("target.sock")).unwrap();
    for page in marks.data.iter().chain([&marks.status, &marks.used]) {
        assert!(
            marks.dirty.contains(page),
            "page {page} not marked; data {:?}, status {}, used {}, marked {:?}",
            marks.data,
            marks.status,
            marks.used,
            marks.dirty
        );
    }
    assert!(after.is_empty(), "marked with logging off: {after:?}");
    assert!(daemon.stop().success());
}

/// The test above can fail: with the marking of read buffers turned off (fault injection),
/// the data pages are missing from the log.
#[test]
fn unmarked_reads_are_missing_from_the_dirty_log() {
    let daemon = hostile::daemon::Daemon::start_env(
        "dirty-log-off",
        "",
        "warn",
        &[("VBMQ_FAULT_UNLOGGED_READS", "1")],
    );
    let (marks, _) = hostile::dirty_log::read_while_logging(&daemon.path("target.sock")).unwrap();
    assert!(
        marks.data.iter().all(|page| !marks.dirty.contains(page)),
        "data pages marked without the read marking: {:?} in {:?}",
        marks.data,
        marks.dirty
    );
    assert!(
        marks.dirty.contains(&marks.status),
        "the status byte goes through vm-memory"
    );
    assert!(daemon.stop().success());
}

#[test]
fn good_requests_wrap_the_rings() {
    let daemon = hostile::daemon::Daemon::start("wrap");
    let socket = daemon.path("target.sock");
    let mut guest =
        hostile::frontend::Guest::connect(&socket, hostile::daemon::QUEUE_SIZE).unwrap();
    let mut model = hostile::daemon::pattern(hostile::daemon::TARGET_SIZE, 1);
    for round in 0..600 {
        hostile::battery::good_request(&mut guest, &mut model, round).unwrap();
    }
    assert_eq!(std::fs::read(daemon.path("target.img")).unwrap(), model);
}

/// Requests of 16 discard ranges each, a full ring of them at a time, on the io_uring path:
/// every range is one completion, many more than the completion queue holds at once. Every
/// request must still complete (completions that overflowed the CQ must not be stranded).
#[test]
fn sixteen_range_discards_overflowing_the_completion_queue_all_complete() {
    use hostile::chain::{Ctx, Seg};
    use hostile::daemon::{Daemon, QUEUE_SIZE};
    use hostile::frontend::Guest;
    use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_OK, VIRTIO_BLK_T_DISCARD};

    let daemon = Daemon::start_with("cq-overflow", ",io=ring");
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
    let per_round = usize::from(QUEUE_SIZE / 3);
    let mut completed = 0;
    for round in 0..12u64 {
        let mut c = Ctx::new(&mut guest);
        let mut statuses = Vec::new();
        for r in 0..per_round as u64 {
            let ranges: Vec<(u64, u32, u32)> = (0..16)
                .map(|i| ((round * 7 + r * 16 + i) % 2048, 1, 0))
                .collect();
            let table = c.ranges(&ranges);
            let hdr = c.header(VIRTIO_BLK_T_DISCARD, 0);
            let st = c.status();
            let head = c.direct(&[Seg::r(hdr, 16), Seg::r(table, 16 * 16), Seg::w(st, 1)]);
            c.submit(head);
            statuses.push(st);
        }
        let heads = std::mem::take(&mut c.heads);
        drop(c);
        guest.publish(&heads);
        let used = guest.wait_used(per_round, std::time::Duration::from_secs(10));
        assert_eq!(
            used.len(),
            per_round,
            "round {round}: {} of {per_round} requests completed",
            used.len()
        );
        for st in statuses {
            assert_eq!(
                guest.ram.read(st, 1)[0],
                VIRTIO_BLK_S_OK as u8,
                "round {round}"
            );
        }
        completed += used.len();
    }
    assert_eq!(completed, 12 * per_round);
    drop(guest);
    assert!(daemon.stop().success());
}

/// With every message on (`RUST_LOG=debug`), a guest that repeats bad input cannot grow the log
/// past the per-call-site rate limits, in any mode. An avail index further ahead than the ring
/// holds stops the queue at once, said once, and closes the connection; the other disks go on,
/// and the next frontend is served.
#[test]
fn repeated_guest_errors_cannot_flood_the_log_in_any_mode() {
    use hostile::chain::{Ctx, Seg};
    use hostile::daemon::{Daemon, QUEUE_SIZE, VICTIM_SIZE, pattern};
    use hostile::frontend::Guest;
    use std::time::{Duration, Instant};

    const LOG_LIMIT: usize = 64 << 10;
    for (mode, opts) in [
        ("event", ",mode=event"),
        ("poll", ",mode=poll,cpus=0-1"),
        ("adaptive", ",mode=adaptive,poll-us=50"),
    ] {
        let daemon = Daemon::start_logging(&format!("flood-{mode}"), opts, "debug");
        let mut victim =
            hostile::victim::Victim::connect(&daemon.path("victim.sock"), pattern(VICTIM_SIZE, 3));
        let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
        // Thousands of requests of an unknown type: each is refused (and was logged).
        let start = Instant::now();
        let mut refused = 0;
        while refused < 3000 && start.elapsed() < Duration::from_secs(20) {
            let mut c = Ctx::new(&mut guest);
            let mut heads = Vec::new();
            for _ in 0..64 {
                let hdr = c.header(0xbad, 0);
                let st = c.status();
                heads.push(c.direct(&[Seg::r(hdr, 16), Seg::w(st, 1)]));
            }
            drop(c);
            guest.publish(&heads);
            let used = guest.wait_used(heads.len(), Duration::from_secs(10));
            assert_eq!(
                used.len(),
                heads.len(),
                "{mode}: refused requests must complete"
            );
            refused += used.len();
        }
        assert!(refused >= 3000, "{mode}: only {refused} requests in 20 s");
        // One more, a second later: its line says how many the limit held back.
        std::thread::sleep(Duration::from_millis(1100));
        let mut c = Ctx::new(&mut guest);
        let hdr = c.header(0xbad, 0);
        let st = c.status();
        let head = c.direct(&[Seg::r(hdr, 16), Seg::w(st, 1)]);
        drop(c);
        guest.publish(&[head]);
        assert_eq!(guest.wait_used(1, Duration::from_secs(10)).len(), 1);
        // An avail index past the ring, held while the worker runs (a poller spins meanwhile).
        let bad = guest.ring.avail_idx().wrapping_add(QUEUE_SIZE + 1);
        guest.publish_avail_idx(bad);
        std::thread::sleep(Duration::from_secs(2));
        guest.kick();
        std::thread::sleep(Duration::from_millis(200));
        victim
            .check()
            .unwrap_or_else(|e| panic!("{mode}: other disk: {e}"));
        let log = daemon.log();
        assert!(
            log.len() < LOG_LIMIT,
            "{mode}: {} bytes of log ({} lines) from one guest:\n{}",
            log.len(),
            log.lines().count(),
            &log[..log.len().min(2000)]
        );
        assert!(
            log.contains("held back"),
            "{mode}: the rate limit must say how much it held back"
        );
        let stopped = log.matches("queue stopped, closing the connection").count();
        assert_eq!(
            stopped, 1,
            "{mode}: the broken ring must be reported once:\n{log}"
        );
        // The connection was closed for the frontend to reset the device: the next is served.
        assert!(
            guest.closed_by_vbmq(Duration::from_secs(5)),
            "{mode}: the broken ring left the connection open"
        );
        drop(guest);
        hostile::battery::next_frontend_served_then_stop(daemon, 1, mode);
    }
}

/// A ring broken by its guest (an avail index past the ring) or its frontend (a memory table
/// that no longer holds the ring), held broken for seconds in every mode: said once, no thread
/// spinning on it, other disks served; the guest's breakage closes the connection and the next
/// frontend is served, the frontend's is served again once the frontend sets it up anew.
#[test]
fn a_broken_ring_is_stopped_without_spinning_until_reset_in_every_mode() {
    use hostile::broken_ring::{Breakage, hold_then_reset};
    let mut failures = Vec::new();
    for mode in ["event", "poll", "adaptive"] {
        for breakage in [
            Breakage::AvailPastTheRing,
            Breakage::MemoryShrunkUnderTheRing,
        ] {
            if let Err(e) = hold_then_reset(mode, breakage) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Guest memory truncated by the frontend under requests, rings and buffers: vbmq survives every
/// access class (its own ring and descriptor reads, io_uring and inline copies into and out of
/// missing pages), closes that connection, and serves the next one.
#[test]
fn guest_memory_truncated_under_vbmq_takes_down_only_its_connection() {
    use hostile::shrinking_memory::{Cut, case};
    for (mode, opts) in [("event", ",mode=event"), ("adaptive", "")] {
        case(&format!("shrink-all-{mode}"), opts, Cut::Everything, false);
    }
    for (name, opts) in [
        ("inline", ""),
        ("ring", ",io=ring"),
        ("buffered", ",direct=off,io=ring"),
    ] {
        case(
            &format!("shrink-read-{name}"),
            opts,
            Cut::DataBuffers,
            false,
        );
        case(
            &format!("shrink-write-{name}"),
            opts,
            Cut::DataBuffers,
            true,
        );
    }
}

/// A guest rebooted 2000 times (a new memory table of unsealable memfds each time: more than
/// the process's guards if replaced tables kept theirs) is still served, and other disks attach.
#[test]
fn memory_tables_replaced_2000_times_leave_guards_for_other_disks() {
    hostile::memory_guard::reboots(2000);
}

/// A region mapped where a replaced table was, truncated under a request: only its own
/// connection is closed; the frontend whose table lay there before is still served.
#[test]
fn a_fault_where_a_replaced_table_was_closes_only_its_own_connection() {
    hostile::memory_guard::region_where_a_replaced_table_was();
}

/// Sealed is not "cannot fault": a hugetlb memfd with no huge pages behind it.
#[test]
fn hugetlb_memory_without_huge_pages_takes_down_only_its_connection() {
    hostile::memory_guard::hugetlb_without_huge_pages();
}

/// One frontend cannot hold more guarded regions than its bound; other disks still attach.
#[test]
fn one_connection_cannot_take_every_memory_guard() {
    hostile::memory_guard::more_guarded_regions_than_one_connection_may_hold();
}
