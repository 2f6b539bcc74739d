//! The SIGBUS guard against a frontend that replaces, multiplies and starves its memory: tables
//! replaced thousands of times, a region mapped where a replaced table was, a hugetlb memfd with
//! no huge pages behind it, more regions that can fault than one connection may hold. After
//! each: vbmq alive, its other disks attach and serve.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use vhost::VhostBackend;
use vhost::vhost_user::VhostUserFrontend;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_T_IN};

use super::battery::good_request;
use super::chain::{Ctx, Seg};
use super::daemon::{Daemon, QUEUE_SIZE, VICTIM_SIZE, pattern};
use super::frontend::Guest;
use super::memory::{GuestRam, REGION1_GPA, memfd, region};
use super::shrinking_memory::{Cut, truncate_under_a_request};
use super::victim::Victim;

/// A frontend address no test mapping uses (vbmq only translates ring addresses with it).
const FAR_VA: u64 = 0x6000_0000_0000;

/// A good request on a fresh frontend of `sock`, whose disk file is `img`.
fn fresh_frontend_served(daemon: &Daemon, sock: &str, img: &str, what: &str) {
    let mut guest = Guest::connect(&daemon.path(sock), QUEUE_SIZE)
        .unwrap_or_else(|e| panic!("{what}: {sock} refuses a new frontend: {e}"));
    let mut model = std::fs::read(daemon.path(img)).unwrap();
    good_request(&mut guest, &mut model, 7)
        .unwrap_or_else(|e| panic!("{what}: a new frontend of {sock}: {e}"));
}

/// vbmq alive; a new libblkio frontend of the victim disk and a new test frontend of the
/// read-only disk attach and are served.
fn other_disks_attach(daemon: &mut Daemon, what: &str) {
    assert!(
        daemon.exited().is_none(),
        "{what}: vbmq died: {:?}\n{}",
        daemon.exited(),
        daemon.log()
    );
    let mut victim = Victim::connect(&daemon.path("victim.sock"), pattern(VICTIM_SIZE, 3));
    victim
        .check()
        .unwrap_or_else(|e| panic!("{what}: the victim disk: {e}"));
    fresh_frontend_served(daemon, "readonly.sock", "readonly.img", what);
}

/// Waits up to 5 s for vbmq to close a connection (or die).
fn wait_for_close(daemon: &mut Daemon) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && daemon.exited().is_none() {
        if daemon.log().contains("closing the connection") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A frontend that reboots its guest `reboots` times (a new memory table of unsealable memfds
/// each time) keeps being served, and other disks still attach afterwards.
pub fn reboots(reboots: usize) {
    let mut daemon = Daemon::start("reboots");
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
    guest.want_acks(true);
    for reboot in 0..reboots {
        let fresh = GuestRam::new();
        if let Err(e) = guest.frontend.set_mem_table(&fresh.regions()) {
            panic!(
                "reboot {reboot} of {reboots}: memory table refused: {e}\n{}",
                daemon.log()
            );
        }
        guest.ram = fresh;
    }
    guest.want_acks(false);
    guest.frontend.get_vring_base(0).unwrap();
    guest.start_queue(0, QUEUE_SIZE).unwrap();
    let mut model = std::fs::read(daemon.path("target.img")).unwrap();
    good_request(&mut guest, &mut model, 1)
        .unwrap_or_else(|e| panic!("after {reboots} reboots: {e}"));
    // While that frontend stays connected.
    other_disks_attach(&mut daemon, "after the reboots");
    drop(guest);
    assert!(daemon.stop().success(), "vbmq must exit 0");
}

/// Where vbmq maps the memfd called `name` (from its /proc/PID/maps), for the report.
fn mapping_of(daemon: &Daemon, name: &str) -> Option<(u64, u64)> {
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", daemon.pid())).ok()?;
    let line = maps
        .lines()
        .find(|l| l.contains(&format!("memfd:{name}")))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    Some((
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    ))
}

/// One frontend maps a huge table, then replaces it (and truncates its file afterwards); a
/// frontend of another disk then maps a region almost as large, which vbmq places where the
/// old table was, and truncates it under a request. Only that second connection may notice:
/// the first keeps being served and vbmq does not touch what else lives there.
pub fn region_where_a_replaced_table_was() {
    const OLD_TABLE: u64 = 32 << 30;
    const NEW_REGION: u64 = 24 << 30;
    let mut daemon = Daemon::start("stale-range");
    let socket = daemon.path("target.sock");
    let mut first = Guest::handshake(&socket, GuestRam::new()).unwrap();
    first.want_acks(true);
    let old = memfd(c"vbmq-hostile-old-table", OLD_TABLE);
    first
        .frontend
        .set_mem_table(&[region(0, OLD_TABLE, FAR_VA, 0, old.as_raw_fd())])
        .unwrap_or_else(|e| panic!("a {OLD_TABLE}-byte table: {e}\n{}", daemon.log()));
    let old_range = mapping_of(&daemon, "vbmq-hostile-old-table");
    first.frontend.set_mem_table(&first.ram.regions()).unwrap();
    first.start_queue(0, QUEUE_SIZE).unwrap();
    first.want_acks(false);
    // The replaced table's file shrinks afterwards: nothing may fault on it any more.
    old.set_len(0).unwrap();
    let mut model = std::fs::read(daemon.path("target.img")).unwrap();
    good_request(&mut first, &mut model, 1).unwrap();

    let ram = GuestRam::single(c"vbmq-hostile-in-the-hole", NEW_REGION);
    let mut second = Guest::handshake(&daemon.path("readonly.sock"), ram).unwrap();
    second.want_acks(true);
    second
        .frontend
        .set_mem_table(&second.ram.regions())
        .unwrap();
    second.start_queue(0, QUEUE_SIZE).unwrap();
    second.want_acks(false);
    let new_range = mapping_of(&daemon, "vbmq-hostile-in-the-hole");
    eprintln!("vbmq mapped the old table at {old_range:x?}, the new region at {new_range:x?}");
    truncate_under_a_request(&mut second, Cut::Everything, false);
    let closed = wait_for_close(&mut daemon);
    assert!(
        daemon.exited().is_none(),
        "vbmq died: {:?}\n{}",
        daemon.exited(),
        daemon.log()
    );
    assert!(closed, "the faulting connection must be closed");
    good_request(&mut first, &mut model, 2).unwrap_or_else(|e| {
        panic!(
            "the first frontend, whose old table lay there, must still be served: {e}\n{}",
            daemon.log()
        )
    });
    drop(second);
    other_disks_attach(&mut daemon, "after the fault");
    drop(first);
    assert!(daemon.stop().success(), "vbmq must exit 0");
}

/// Empties the default huge page pool (nr_hugepages and nr_overcommit_hugepages 0), and
/// restores it when dropped.
struct NoHugePages(Vec<(&'static str, String)>);

impl NoHugePages {
    fn take() -> Self {
        let mut saved = Vec::new();
        for knob in [
            "/proc/sys/vm/nr_hugepages",
            "/proc/sys/vm/nr_overcommit_hugepages",
        ] {
            let was = std::fs::read_to_string(knob).unwrap_or_default();
            if was.trim() != "0" {
                std::fs::write(knob, "0").unwrap_or_else(|e| panic!("{knob}: {e}"));
                saved.push((knob, was));
            }
        }
        NoHugePages(saved)
    }
}

impl Drop for NoHugePages {
    fn drop(&mut self) {
        for (knob, was) in &self.0 {
            let _ = std::fs::write(knob, was.trim());
        }
    }
}

/// A sealable hugetlb memfd of `size` bytes, or why there is none.
fn hugetlb_memfd(size: u64) -> Result<File, String> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_ALLOW_SEALING;
    // SAFETY: a NUL-terminated name and valid flags; the descriptor is owned by the File.
    let fd = unsafe { libc::memfd_create(c"vbmq-hostile-huge".as_ptr(), flags) };
    if fd < 0 {
        return Err(format!(
            "memfd_create(MFD_HUGETLB): {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a fresh descriptor nobody else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size)
        .map_err(|e| format!("ftruncate of a hugetlb memfd: {e}"))?;
    Ok(file)
}

/// Region 1 is a sealable hugetlb memfd with no huge page to back it (this process never
/// touches it). A read into it gets IOERR (or its connection closed); a request header in it
/// faults in vbmq itself: that connection is closed, vbmq and the other disks go on.
pub fn hugetlb_without_huge_pages() {
    const HUGE: u64 = 2 << 20;
    let _pool = NoHugePages::take();
    let huge = match hugetlb_memfd(HUGE) {
        Ok(file) => file,
        Err(why) => {
            eprintln!("SKIPPED: this kernel has no hugetlb memfds: {why}");
            return;
        }
    };
    let mut daemon = Daemon::start("hugetlb");
    let mut guest = Guest::handshake(&daemon.path("target.sock"), GuestRam::new()).unwrap();
    guest.want_acks(true);
    let mut regions = guest.ram.regions();
    regions[1] = region(REGION1_GPA, HUGE, FAR_VA, 0, huge.as_raw_fd());
    guest.frontend.set_mem_table(&regions).unwrap();
    guest.start_queue(0, QUEUE_SIZE).unwrap();
    guest.want_acks(false);

    // Its data buffer in the region: the kernel's copy fails.
    let mut c = Ctx::new(&mut guest);
    let hdr = c.header(VIRTIO_BLK_T_IN, 8);
    let st = c.status();
    let head = c.direct(&[Seg::r(hdr, 16), Seg::w(REGION1_GPA, 4096), Seg::w(st, 1)]);
    drop(c);
    guest.ram.write(st, &[0xff]);
    guest.publish(&[head]);
    let used = guest.wait_used(1, Duration::from_secs(5));
    let status = guest.ram.read(st, 1)[0];
    assert!(
        daemon.exited().is_none(),
        "vbmq died on a read into hugetlb memory without huge pages: {:?}\n{}",
        daemon.exited(),
        daemon.log()
    );
    let closed = daemon.log().contains("closing the connection");
    eprintln!("a read into the hugetlb region: status {status:#x}, connection closed: {closed}");
    assert!(
        (used.len() == 1 && status == VIRTIO_BLK_S_IOERR as u8) || closed,
        "a read into memory that faults: status {status:#x}, {} used\n{}",
        used.len(),
        daemon.log()
    );

    // Its header in the region: vbmq's own read faults.
    if !closed {
        let mut c = Ctx::new(&mut guest);
        let buf = c.buffer(4096, None);
        let st = c.status();
        let head = c.direct(&[
            Seg::r(REGION1_GPA + 8192, 16),
            Seg::w(buf, 4096),
            Seg::w(st, 1),
        ]);
        drop(c);
        guest.publish(&[head]);
        let closed = wait_for_close(&mut daemon);
        assert!(
            closed && daemon.exited().is_none(),
            "a header in memory that faults: vbmq must close the connection and live on \
             (exited: {:?})\n{}",
            daemon.exited(),
            daemon.log()
        );
    }
    drop(guest);
    other_disks_attach(&mut daemon, "after hugetlb faults");
    fresh_frontend_served(&daemon, "target.sock", "target.img", "after hugetlb faults");
    assert!(daemon.stop().success(), "vbmq must exit 0");
}

/// Regions that can fault, added one at a time (ADD_MEM_REG): a full table's worth is served.
/// Then, while the queue's worker still holds that table, they are removed and as many new ones
/// added: past its bound the connection is refused, and the other disks still attach.
pub fn more_guarded_regions_than_one_connection_may_hold() {
    const ADDED: u64 = 300;
    const ADDED_GPA: u64 = 64 << 20;
    let mut daemon = Daemon::start_with("guards", ",mode=event");
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
    let add = |guest: &mut Guest, file: &File, i: u64, va: u64| {
        let r = region(
            ADDED_GPA + (i << 20),
            4096,
            va + (i << 12),
            i << 12,
            file.as_raw_fd(),
        );
        guest.frontend.add_mem_region(&r)
    };
    let first = memfd(c"vbmq-hostile-added", ADDED << 12);
    guest.want_acks(true);
    for i in 0..ADDED {
        add(&mut guest, &first, i, FAR_VA).unwrap_or_else(|e| {
            panic!(
                "ADD_MEM_REG {i} of {ADDED} regions that can fault: {e}\n{}",
                daemon.log()
            )
        });
    }
    guest.want_acks(false);
    // The queue's worker takes the table with them, and keeps it until it runs again.
    let mut model = std::fs::read(daemon.path("target.img")).unwrap();
    good_request(&mut guest, &mut model, 1).unwrap();
    guest.want_acks(true);
    for i in 0..ADDED {
        let r = region(ADDED_GPA + (i << 20), 4096, FAR_VA + (i << 12), i << 12, 0);
        guest
            .frontend
            .remove_mem_region(&r)
            .unwrap_or_else(|e| panic!("REM_MEM_REG {i}: {e}"));
    }
    let second = memfd(c"vbmq-hostile-readded", ADDED << 12);
    let refused = (0..ADDED).find(|&i| add(&mut guest, &second, i, FAR_VA + (1 << 30)).is_err());
    assert!(
        refused.is_some(),
        "{} regions that can fault held by one connection, none refused",
        2 * ADDED
    );
    assert!(
        wait_for_close(&mut daemon),
        "the refused connection is closed"
    );
    eprintln!("the new region {refused:?} was refused");
    other_disks_attach(&mut daemon, "after one connection's bound");
    drop(guest);
    fresh_frontend_served(&daemon, "target.sock", "target.img", "after the bound");
    assert!(daemon.stop().success(), "vbmq must exit 0");
}
