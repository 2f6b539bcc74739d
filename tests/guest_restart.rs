//! vbmq killed or upgraded under a running Linux guest: QEMU reconnects (`reconnect-ms`), hands
//! the new process the in-flight record the old one kept, and the guest notices nothing. The
//! disk holds every eighth completion for a while (`delay-us`), so at each kill requests are in
//! flight behind others that completed: what must be resubmitted is not a prefix of the ring.

mod guest;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use guest::{
    GuestRun, RESTART_DELAY as DELAY, RESTART_JOB as JOB, TestDir, Vbmq, Vm,
    assert_image_holds_the_restart_job, script, tagged, wait_for_console,
};

/// One vbmq command line, started again after each kill, each run logging to its own file.
struct Restarter {
    disk: String,
    socket: PathBuf,
    dir: PathBuf,
    runs: usize,
}

impl Restarter {
    fn start(&mut self) -> Vbmq {
        // The socket of a killed process stays behind: gone, it tells when the new one listens.
        let _ = std::fs::remove_file(&self.socket);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        cmd.args(["serve", "--disk", &self.disk])
            .env("RUST_LOG", "info");
        self.runs += 1;
        let log = self.dir.join(format!("vbmq-{}.log", self.runs));
        Vbmq::spawn(cmd, vec![self.socket.clone()], log)
    }

    /// Requests each run after the first resubmitted, from its log.
    fn resubmitted(&self) -> Vec<usize> {
        (2..=self.runs)
            .map(|run| {
                let log = std::fs::read_to_string(self.dir.join(format!("vbmq-{run}.log")))
                    .unwrap_or_default();
                log.lines()
                    .filter_map(|line| {
                        let (_, rest) = line.split_once("resubmitting ")?;
                        rest.split_whitespace().next()?.parse::<usize>().ok()
                    })
                    .sum()
            })
            .collect()
    }
}

/// How a vbmq process is ended under the guest.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// SIGKILL: a crash.
    Kill,
    /// SIGTERM, which must drain and exit 0: an upgrade.
    Term,
}

/// The guest writes and verifies under fio while another thread ends vbmq in each of the ways
/// of `stops`, 2.5 s apart, and starts it again; returns the guest's run (or why it did not
/// finish), the restarter, the last vbmq and the image.
fn run_with_restarts(
    dir: &TestDir,
    inflight: bool,
    stops: &'static [Stop],
    timeout: Duration,
) -> (Result<GuestRun, String>, Restarter, Vbmq, PathBuf) {
    let socket = dir.join("disk.sock");
    let image = dir.disk("disk.img", 32);
    let console = dir.join("console.log");
    let mut restarter = Restarter {
        disk: format!(
            "socket={},path={},queues=2,inflight={},{DELAY}",
            socket.display(),
            image.display(),
            if inflight { "on" } else { "off" }
        ),
        socket: socket.clone(),
        dir: dir.path().to_path_buf(),
        runs: 0,
    };
    let mut vbmq = restarter.start();
    let mut vm = Vm::new(2).disk(&socket, 2);
    vm.reconnect_ms = Some(500);
    vm.console = Some(console.clone());
    vm.timeout = timeout;
    let killer = std::thread::spawn(move || {
        wait_for_console(&console, "KILLS-BEGIN", Duration::from_secs(120));
        for stop in stops {
            std::thread::sleep(Duration::from_millis(2500));
            match stop {
                Stop::Kill => vbmq.kill(),
                Stop::Term => {
                    let status = vbmq.terminate();
                    assert!(
                        status.is_some_and(|s| s.success()),
                        "SIGTERM under I/O: {status:?}"
                    );
                }
            }
            vbmq = restarter.start();
        }
        (restarter, vbmq)
    });
    let run = vm.try_run(&script(&format!(
        "echo KILLS-BEGIN
         if fio --filename=/dev/vda --cpus_allowed=0-1 --cpus_allowed_policy=split {JOB} \
             >/tmp/fio.log 2>&1 && grep -q 'err= 0' /tmp/fio.log; then
             echo FIO-OK
         fi
         grep -E 'clat .*max=|lat .*max=' /tmp/fio.log | sed 's/^/FIO-LAT /' || true
         if dmesg | grep -iE 'I/O error|not a head|hung task|blk_update_request'; then
             echo DMESG-ERRORS
         fi"
    )));
    let (restarter, vbmq) = killer.join().expect("the killer thread");
    (run, restarter, vbmq, image)
}

fn report(what: &str, run: &GuestRun, restarter: &Restarter, stops: &[Stop]) {
    eprintln!(
        "{what}: {} stops {stops:?}, requests resubmitted per restart {:?}, fio: {:?}",
        stops.len(),
        restarter.resubmitted(),
        tagged(&run.output, "FIO-LAT")
    );
}

/// Five crashes and one upgrade in one guest run: fio verifies every block, the guest logs no
/// I/O error, the image holds what fio wrote, and the restarts did resubmit requests.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn crashes_and_upgrades_under_io_lose_nothing() {
    const STOPS: &[Stop] = &[
        Stop::Kill,
        Stop::Kill,
        Stop::Term,
        Stop::Kill,
        Stop::Kill,
        Stop::Kill,
    ];
    let dir = TestDir::new("restart");
    let (run, restarter, vbmq, image) =
        run_with_restarts(&dir, true, STOPS, Duration::from_secs(300));
    let run = run.unwrap_or_else(|why| panic!("{why}"));
    report("in-flight tracking", &run, &restarter, STOPS);
    run.assert_fio_ok();
    assert!(
        restarter.resubmitted().iter().any(|&n| n > 0),
        "no restart found requests in flight: the test did not reach the case it is for"
    );
    vbmq.stop();
    assert_image_holds_the_restart_job(&image);
}

/// The same crash without in-flight tracking (`inflight=off`, as qemu-storage-daemon): the ring
/// restarts at the guest's used index, the request held behind completed ones is never run
/// again, and the guest notices (fio hangs or fails, or the kernel logs errors).
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn without_tracking_the_guest_notices_a_crash() {
    const STOPS: &[Stop] = &[Stop::Kill];
    let dir = TestDir::new("restart-off");
    let (run, _restarter, _vbmq, _image) =
        run_with_restarts(&dir, false, STOPS, Duration::from_secs(60));
    if let Ok(run) = run {
        let clean = run.status == 0
            && tagged(&run.output, "FIO-OK").len() == 1
            && tagged(&run.output, "DMESG-ERRORS").is_empty();
        assert!(
            !clean,
            "the guest did not notice the crash:\n{}",
            run.console
        );
    }
}
