//! Runs cases against a live vbmq and checks everything docs/hostile-guest.md promises after each.

use std::time::Duration;

use super::chain::{Ctx, Seg};
use super::daemon::{self, Daemon, QUEUE_SIZE};
use super::expect::{Expect, FileChange, IOERR, OK, Outcome, UNSUPP};
use super::frontend::{BlkConfig, Guest, SCRATCH_START};
use super::memory::{MEMORY_END, REGION0_SIZE};
use super::victim::Victim;
use virtio_bindings::virtio_blk::{VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT};

const COMPLETION_TIMEOUT: Duration = Duration::from_secs(5);
/// More log than this from one case means a guest can flood the host's log.
const LOG_LIMIT: u64 = 1 << 20;
const QUIET_PERIOD: Duration = Duration::from_millis(150);
/// The good request after each case allocates here, away from the case's buffers.
const GOOD_GPA: u64 = REGION0_SIZE - (256 << 10);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disk {
    Target,
    ReadOnly,
}

pub type Build = Box<dyn Fn(&mut Ctx, &BlkConfig) -> Expect>;

pub struct Case {
    pub name: String,
    pub disk: Disk,
    pub build: Build,
}

pub fn case(
    name: impl Into<String>,
    disk: Disk,
    build: impl Fn(&mut Ctx, &BlkConfig) -> Expect + 'static,
) -> Case {
    Case {
        name: name.into(),
        disk,
        build: Box::new(build),
    }
}

struct Served {
    guest: Option<Guest>,
    model: Vec<u8>,
    file: std::path::PathBuf,
    socket: std::path::PathBuf,
}

pub struct Battery {
    pub daemon: Daemon,
    target: Served,
    readonly: Served,
    victim: Victim,
    good_round: u64,
    pub failures: Vec<String>,
    pub ran: usize,
    name: String,
    target_opts: String,
}

impl Battery {
    pub fn start(name: &str) -> Self {
        Self::start_with(name, "")
    }

    /// A battery whose attacked disk gets `target_opts` (e.g. ",mode=adaptive").
    pub fn start_with(name: &str, target_opts: &str) -> Self {
        let daemon = Daemon::start_with(name, target_opts);
        let served = |img: &str, sock: &str, size, seed| Served {
            guest: Some(Guest::connect(&daemon.path(sock), QUEUE_SIZE).unwrap()),
            model: daemon::pattern(size, seed),
            file: daemon.path(img),
            socket: daemon.path(sock),
        };
        let target = served("target.img", "target.sock", daemon::TARGET_SIZE, 1);
        let readonly = served("readonly.img", "readonly.sock", daemon::READONLY_SIZE, 2);
        let victim = Victim::connect(
            &daemon.path("victim.sock"),
            daemon::pattern(daemon::VICTIM_SIZE, 3),
        );
        Battery {
            daemon,
            target,
            readonly,
            victim,
            good_round: 0,
            failures: Vec::new(),
            ran: 0,
            name: name.into(),
            target_opts: target_opts.into(),
        }
    }

    pub fn run(&mut self, case: &Case) {
        self.ran += 1;
        let started = std::time::Instant::now();
        let mut result = self.run_checked(case);
        let log_len = std::fs::metadata(self.daemon.path("vbmq.log"))
            .map(|m| m.len())
            .unwrap_or(0);
        if result.is_ok() && log_len > LOG_LIMIT {
            result = Err(format!(
                "vbmq log grew to {log_len} bytes (a guest can flood the host log)"
            ));
        }
        say_result(started, &case.name, &result);
        if log_len > LOG_LIMIT {
            // Keep the disk from filling; later cases measure their own growth.
            let _ = std::fs::File::create(self.daemon.path("vbmq.log"));
        }
        if let Err(why) = result {
            self.failures.push(format!("{}: {why}", case.name));
            // Isolate the next case from whatever state this one left.
            let served = match case.disk {
                Disk::Target => &mut self.target,
                Disk::ReadOnly => &mut self.readonly,
            };
            served.guest = None;
            // Resynchronise so one failure is not reported again by every later case.
            if let Ok(file) = std::fs::read(&served.file) {
                served.model = file;
            }
        }
        self.restart_if_died(&case.name);
    }

    fn run_checked(&mut self, case: &Case) -> Result<(), String> {
        let served = match case.disk {
            Disk::Target => &mut self.target,
            Disk::ReadOnly => &mut self.readonly,
        };
        if served.guest.is_none() {
            served.guest = Some(
                Guest::connect(&served.socket, QUEUE_SIZE)
                    .map_err(|e| format!("reconnect: {e}"))?,
            );
        }
        let guest = served.guest.as_mut().unwrap();
        guest.take_used();
        let config = guest.config;
        guest.ram.poison(SCRATCH_START, MEMORY_END);

        let mut ctx = Ctx::new(guest);
        let expect = (case.build)(&mut ctx, &config);
        let (heads, writable, avail_override) = (
            ctx.heads.clone(),
            ctx.writable.clone(),
            ctx.avail_idx_override,
        );
        let before = guest
            .ram
            .read(SCRATCH_START, (MEMORY_END - SCRATCH_START) as usize);
        match avail_override {
            Some(idx) => guest.publish_avail_idx(idx),
            None => guest.publish(&heads),
        }

        let wanted = match expect.outcome {
            Outcome::Reused { .. } => 2,
            Outcome::NoCompletion | Outcome::ConnectionEnds => 0,
            _ => 1,
        };
        let mut used = guest.wait_used(wanted, COMPLETION_TIMEOUT);
        std::thread::sleep(if wanted == 0 {
            QUIET_PERIOD
        } else {
            Duration::from_millis(5)
        });
        used.extend(guest.take_used());
        for elem in &used {
            if !heads.contains(&(elem.id as u16)) || elem.id >= u32::from(guest.queue_size) {
                return Err(format!(
                    "used ring returned id {} that was not submitted (heads {heads:?}; last used entries (idx, id, len): {:?})",
                    elem.id, guest.history
                ));
            }
        }
        let status_byte = |at: u64| guest.ram.read(at, 1)[0];
        let poisoned = |at: u64| status_byte(at) == before[(at - SCRATCH_START) as usize];
        let mut succeeded = false;
        match expect.outcome {
            Outcome::Status { status_at, status } => {
                one_completion(&used)?;
                let got = status_byte(status_at);
                if got != status {
                    let shown = if poisoned(status_at) {
                        "not written".to_string()
                    } else {
                        got.to_string()
                    };
                    return Err(format!("status {shown}, expected {status}"));
                }
                if used[0].len == 0 {
                    return Err("status written but used length 0".into());
                }
                succeeded = status == OK;
            }
            Outcome::OkOrIoerr { status_at } => {
                one_completion(&used)?;
                let got = status_byte(status_at);
                if got != OK && got != IOERR || poisoned(status_at) {
                    return Err(format!(
                        "status {got} (written: {}), expected OK or IOERR",
                        !poisoned(status_at)
                    ));
                }
                succeeded = got == OK;
            }
            Outcome::Broken { status_at } => {
                one_completion(&used)?;
                let error_status = status_at
                    .is_some_and(|at| !poisoned(at) && matches!(status_byte(at), IOERR | UNSUPP));
                if used[0].len != 0 && !error_status {
                    return Err(format!(
                        "broken chain completed with used length {} and no error status at its status byte",
                        used[0].len
                    ));
                }
                if status_at.is_some_and(|at| !poisoned(at) && status_byte(at) == OK) {
                    return Err("broken chain reported OK".into());
                }
            }
            Outcome::NoCompletion => {
                if !used.is_empty() {
                    return Err(format!("{} unexpected completions", used.len()));
                }
            }
            Outcome::ConnectionEnds => {
                if !used.is_empty() {
                    return Err(format!("{} unexpected completions", used.len()));
                }
                if !guest.closed_by_vbmq(COMPLETION_TIMEOUT) {
                    return Err("the queue stopped but the connection stayed open: the \
                                frontend cannot know it must reset the device"
                        .into());
                }
            }
            Outcome::Reused { status_at } => {
                if used.is_empty() || used.len() > 2 {
                    return Err(format!(
                        "{} completions for a head submitted twice",
                        used.len()
                    ));
                }
                if !poisoned(status_at) && status_byte(status_at) != OK {
                    return Err(format!("status {}", status_byte(status_at)));
                }
            }
        }

        let strays = guest.ram.stray_writes(SCRATCH_START, &before, &writable);
        if !strays.is_empty() {
            return Err(format!(
                "vbmq wrote guest memory outside device-writable buffers at {strays:#x?}"
            ));
        }

        let mut expected = served.model.clone();
        let file = std::fs::read(&served.file).map_err(|e| e.to_string())?;
        if file.len() != expected.len() {
            return Err(format!("disk file length changed to {}", file.len()));
        }
        if succeeded {
            match &expect.change {
                FileChange::None => {}
                FileChange::Write { offset, data } => {
                    expected[*offset as usize..*offset as usize + data.len()].copy_from_slice(data)
                }
                FileChange::Zero { offset, len } => {
                    expected[*offset as usize..(*offset + *len) as usize].fill(0)
                }
                FileChange::Undefined { offset, len } => {
                    let range = *offset as usize..(*offset + *len) as usize;
                    expected[range.clone()].copy_from_slice(&file[range]);
                }
            }
            if let Some((iov, offset)) = &expect.read {
                let got: Vec<u8> = iov
                    .iter()
                    .flat_map(|&(gpa, len)| guest.ram.read(gpa, len as usize))
                    .collect();
                let at = *offset as usize;
                if got[..] != expected[at..at + got.len()] {
                    return Err(format!("read returned wrong data for disk offset {offset}"));
                }
            }
        }
        if let Some(at) = file.iter().zip(&expected).position(|(a, b)| a != b) {
            return Err(format!(
                "disk file byte {at} changed (success: {succeeded})"
            ));
        }
        served.model = expected;

        // The queue still serves a good request (a new frontend for a queue vbmq stopped).
        self.good_round += 1;
        let round = self.good_round;
        let good = if matches!(expect.outcome, Outcome::ConnectionEnds) {
            Err("the connection ended".to_string())
        } else {
            good_request(served.guest.as_mut().unwrap(), &mut served.model, round)
        };
        if let Err(why) = good {
            if !matches!(expect.outcome, Outcome::ConnectionEnds) {
                return Err(format!("queue no longer serves: {why}"));
            }
            served.guest = None;
            served.guest = Some(
                Guest::connect(&served.socket, QUEUE_SIZE)
                    .map_err(|e| format!("reconnect: {e}"))?,
            );
            good_request(served.guest.as_mut().unwrap(), &mut served.model, round)
                .map_err(|why| format!("new frontend not served: {why}"))?;
        }
        self.victim.check()
    }

    /// Runs a vhost-user case on its own connection, then checks the next frontend is served.
    pub fn run_vhost(&mut self, case: &super::vhost::VhostCase) {
        self.ran += 1;
        let started = std::time::Instant::now();
        // Descriptors with a normal frontend connected, before and after the case.
        let fds_before = self.target.guest.as_ref().map(|_| self.daemon.fd_count());
        self.target.guest = None;
        let attack = (case.attack)(&self.target.socket);
        let mut result = match (attack, case.must) {
            (Err(why), _) => Err(why),
            (Ok(false), super::vhost::Must::BeRefused) => Err("accepted, not refused".to_string()),
            (Ok(_), _) => Ok(()),
        };
        let round = self.good_round + 1;
        self.good_round = round;
        let next = Guest::connect(&self.target.socket, QUEUE_SIZE)
            .map_err(|e| format!("next frontend not served: {e}"))
            .and_then(|mut guest| {
                let served = good_request(&mut guest, &mut self.target.model, round);
                self.target.guest = Some(guest);
                served.map_err(|why| format!("next frontend's good request: {why}"))
            })
            .and_then(|()| self.victim.check());
        if let (Ok(()), Err(why)) = (&result, next) {
            result = Err(why);
        }
        // Closing a connection is asynchronous in vbmq: allow a second to settle.
        let mut fds_after = self.daemon.fd_count();
        for _ in 0..50 {
            if fds_before.is_none_or(|before| fds_after <= before + 4) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
            fds_after = self.daemon.fd_count();
        }
        if let (Ok(()), Some(before)) = (&result, fds_before)
            && fds_after > before + 4
        {
            result = Err(format!(
                "vbmq leaked {} file descriptors (now {})",
                fds_after - before,
                self.daemon.fd_kinds()
            ));
        }
        if let Ok(file) = std::fs::read(&self.target.file) {
            if result.is_ok() && file != self.target.model {
                result = Err("disk file changed".into());
            }
            self.target.model = file;
        }
        say_result(started, &case.name, &result);
        if let Err(why) = result {
            self.failures.push(format!("{}: {why}", case.name));
            self.target.guest = None;
        }
        self.restart_if_died(&case.name);
    }

    /// When vbmq died during case `name`: a failure with its log, and a new vbmq for the next
    /// cases.
    fn restart_if_died(&mut self, name: &str) {
        if let Some(status) = self.daemon.exited() {
            self.failures.push(format!(
                "{name}: vbmq died ({status}); log:\n{}",
                self.daemon.log()
            ));
            *self = Battery {
                failures: std::mem::take(&mut self.failures),
                ran: self.ran,
                ..Battery::start_with(
                    &format!("{}-restart{}", self.name, self.ran),
                    &self.target_opts,
                )
            };
        }
    }

    pub fn finish(self) -> Vec<String> {
        let mut failures = self.failures;
        let status = self.daemon.stop();
        if !status.success() {
            failures.push(format!("vbmq exited with {status} on SIGTERM"));
        }
        failures
    }
}

fn one_completion(used: &[super::frontend::UsedElem]) -> Result<(), String> {
    match used.len() {
        1 => Ok(()),
        0 => Err("no completion: the head was never returned".into()),
        n => Err(format!("{n} completions for one request")),
    }
}

/// One line a case: how long it took and its result.
fn say_result(started: std::time::Instant, name: &str, result: &Result<(), String>) {
    let result = match result {
        Ok(()) => "ok".to_string(),
        Err(why) => format!("FAILED: {why}"),
    };
    eprintln!("[{:.2}s] {name}: {result}", started.elapsed().as_secs_f64());
}

/// A new frontend on the attacked disk gets a good request (`round`) served, then vbmq exits 0
/// at SIGTERM (`what` names the case in a failure).
pub fn next_frontend_served_then_stop(daemon: Daemon, round: u64, what: &str) {
    let mut guest = Guest::connect(&daemon.path("target.sock"), QUEUE_SIZE).unwrap();
    let mut model = std::fs::read(daemon.path("target.img")).unwrap();
    good_request(&mut guest, &mut model, round)
        .unwrap_or_else(|e| panic!("{what}: the next frontend: {e}"));
    drop(guest);
    assert!(daemon.stop().success(), "{what}: vbmq must exit 0");
}

/// Writes 4 KiB somewhere on a writable disk (a read on a read-only one) and reads it back.
pub fn good_request(guest: &mut Guest, model: &mut [u8], round: u64) -> Result<(), String> {
    guest.take_used();
    let sectors = model.len() as u64 / 512;
    let sector = round * 8 % (sectors - 8);
    let offset = (sector * 512) as usize;
    let readonly = guest.config.features & (1 << virtio_bindings::virtio_blk::VIRTIO_BLK_F_RO) != 0;
    let mut ctx = Ctx::at(guest, GOOD_GPA, QUEUE_SIZE - 8);
    let data_seed = round as u8;
    let mut heads = Vec::new();
    let mut statuses = Vec::new();
    if !readonly {
        let hdr = ctx.header(VIRTIO_BLK_T_OUT, sector);
        let buf = ctx.buffer(4096, Some(data_seed));
        let st = ctx.status();
        heads.push(ctx.direct(&[Seg::r(hdr, 16), Seg::r(buf, 4096), Seg::w(st, 1)]));
        statuses.push(st);
        let written = ctx.ram().read(buf, 4096);
        model[offset..offset + 4096].copy_from_slice(&written);
    }
    let hdr = ctx.header(VIRTIO_BLK_T_IN, sector);
    let buf = ctx.buffer(4096, None);
    let st = ctx.status();
    let read_head = ctx.direct(&[Seg::r(hdr, 16), Seg::w(buf, 4096), Seg::w(st, 1)]);
    ctx.g.ram.write(st, &[0xff]);
    // Write first, then read: one request at a time keeps the order.
    for (i, head) in heads.iter().chain([&read_head]).enumerate() {
        let status_at = statuses.get(i).copied().unwrap_or(st);
        ctx.g.ram.write(status_at, &[0xff]);
        ctx.g.publish(&[*head]);
        let used = ctx.g.wait_used(1, COMPLETION_TIMEOUT);
        if used.len() != 1 || used[0].id != u32::from(*head) {
            return Err(format!(
                "good request {i} (head {head}): completions {used:?}; last used entries (idx, id, len): {:?}",
                ctx.g.history
            ));
        }
        let status = ctx.g.ram.read(status_at, 1)[0];
        if status != OK {
            return Err(format!("good request {i}: status {status}"));
        }
    }
    if ctx.g.ram.read(buf, 4096)[..] != model[offset..offset + 4096] {
        return Err("good read returned wrong data".into());
    }
    Ok(())
}
