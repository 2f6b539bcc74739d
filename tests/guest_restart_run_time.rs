//! An upgrade under a running Linux guest whose disk was added at run time: `vbmq ctl --state
//! FILE add-disk` (image and socket passed to the confined vbmq), then vbmq is stopped with
//! SIGTERM (an upgrade) and killed (a crash), each time started again with `--state FILE`,
//! which opens the disk itself; QEMU reconnects and hands over its in-flight record, and fio in
//! the guest verifies every block.

mod common;
mod guest;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::ctl::{ok, wait_for_requests_in_flight};
use common::disk_spec;
use common::{ctl_state, s};
use guest::{
    RESTART_DELAY as DELAY, RESTART_JOB as JOB, TestDir, Vbmq, Vm,
    assert_image_holds_the_restart_job, script, wait_for_console,
};

struct Starter {
    control: PathBuf,
    state: PathBuf,
    socket: PathBuf,
    dir: PathBuf,
    runs: usize,
}

impl Starter {
    /// `vbmq serve --control --state`; from the second run on, it serves the disk at start.
    fn start(&mut self) -> Vbmq {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        cmd.args([
            "serve",
            "--control",
            s(&self.control),
            "--state",
            s(&self.state),
        ])
        .env("RUST_LOG", "info");
        self.runs += 1;
        let log = self.dir.join(format!("vbmq-{}.log", self.runs));
        let mut sockets = vec![self.control.clone()];
        if self.runs > 1 {
            // The socket of the process before stays behind: gone, it tells when this one
            // listens.
            let _ = std::fs::remove_file(&self.socket);
            sockets.push(self.socket.clone());
        }
        Vbmq::spawn(cmd, sockets, log)
    }
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_disk_added_at_run_time_survives_an_upgrade_and_a_crash_under_io() {
    let dir = TestDir::new("restart-run-time");
    let image = dir.disk("disk.img", 32);
    let console = dir.join("console.log");
    let mut starter = Starter {
        control: dir.join("run/ctl.sock"),
        state: dir.join("state.toml"),
        socket: dir.join("vm/disk.sock"),
        dir: dir.path().to_path_buf(),
        runs: 0,
    };
    let vbmq = starter.start();
    let spec = disk_spec::with(&starter.socket, &image, &format!(",queues=2,{DELAY}"));
    ok(&ctl_state(
        &starter.control,
        &starter.state,
        &["add-disk", &spec],
    ));
    let mut vm = Vm::new(2).disk(&starter.socket, 2);
    vm.reconnect_ms = Some(500);
    vm.console = Some(console.clone());
    vm.timeout = Duration::from_secs(300);
    let (control, socket) = (starter.control.clone(), starter.socket.clone());
    let stopper = std::thread::spawn(move || {
        let mut vbmq = vbmq;
        wait_for_console(&console, "KILLS-BEGIN", Duration::from_secs(120));
        for upgrade in [true, false] {
            wait_for_requests_in_flight(&control, &socket, Duration::from_secs(240));
            if upgrade {
                let status = vbmq.terminate();
                assert!(status.is_some_and(|s| s.success()), "SIGTERM: {status:?}");
            } else {
                vbmq.kill();
            }
            vbmq = starter.start();
        }
        vbmq
    });
    let run = vm.try_run(&script(&format!(
        "echo KILLS-BEGIN
         if fio --filename=/dev/vda --cpus_allowed=0-1 --cpus_allowed_policy=split {JOB} \
             >/tmp/fio.log 2>&1 && grep -q 'err= 0' /tmp/fio.log; then
             echo FIO-OK
         fi
         if dmesg | grep -iE 'I/O error|not a head|hung task|blk_update_request'; then
             echo DMESG-ERRORS
         fi"
    )));
    let vbmq = stopper.join().expect("the stopper thread");
    let run = run.unwrap_or_else(|why| panic!("{why}"));
    run.assert_fio_ok();
    // Requests were in flight at a stop, and resubmitted by the next process.
    let resubmitted: Vec<usize> = (2..=3)
        .map(|run| {
            let log =
                std::fs::read_to_string(dir.join(&format!("vbmq-{run}.log"))).unwrap_or_default();
            log.lines()
                .filter_map(|line| {
                    let (_, rest) = line.split_once("resubmitting ")?;
                    rest.split_whitespace().next()?.parse::<usize>().ok()
                })
                .sum()
        })
        .collect();
    eprintln!("requests resubmitted per restart: {resubmitted:?}");
    assert!(
        resubmitted.iter().any(|&n| n > 0),
        "no restart found requests in flight: the test did not reach the case it is for"
    );
    vbmq.stop();
    assert_image_holds_the_restart_job(&image);
}
