//! Live migration of a running Linux guest whose disks vbmq serves: the source VM's disks on
//! one pair of sockets, the destination's (`-incoming`) on another pair of the same images, in
//! one vbmq process (shared storage: the images are not copied). QEMU copies guest memory
//! while the guest runs, again and again for the pages written since; the pages vbmq writes
//! (data of reads, status bytes, used rings) reach the destination only through vbmq's dirty
//! log.
//!
//! Once the migration has copied all memory, the guest reads a region it wrote earlier, with
//! O_DIRECT, into a buffer no CPU writes afterwards (`guest/dma_reader.c`), and compares it on
//! the destination with the disk: a page vbmq failed to log arrives as it was before the read.
//! (A read into the page cache does not show this: the pages the guest allocates for its cache
//! were mostly written by its CPU since the last copy, so QEMU copies them again anyway.) A
//! writer with its own verification runs throughout. The test also cancels a migration
//! half-way and migrates back.

mod guest;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use guest::{
    Qmp, RunningVm, TestDir, Vbmq, Vm, build_c, print_log, read_consoles, result_of, script,
    tagged, wait_for_console,
};

/// Words the host writes over the whole mailbox disk; the guest polls it.
const MIGRATING: &str = "MIGR";
const DONE: &str = "DONE";
const MAILBOX_BYTES: usize = 1 << 20;

const GUEST: &str = r#"
# Region A (the first 32 MiB) written with checksummed blocks before any migration.
A="--name=a --filename=/dev/vda --size=32M --bs=64k --rw=write --verify=crc32c \
    --verify_state_save=0 --ioengine=libaio --iodepth=8 --direct=1"
quiet fio $A --do_verify=0

# The writer: random writes over 32-48 MiB, each round read back and checked, until told.
# Long rounds at a modest rate: a new fio process dirties more guest memory than its I/O.
writer() {
    round=0
    while [ ! -e /tmp/stop ]; do
        round=$((round + 1))
        fio --name=w --filename=/dev/vda --offset=32M --size=16M --rw=randwrite \
            --bsrange=4k-64k --ioengine=libaio --iodepth=8 --direct=1 --number_ios=1500 \
            --rate_iops=150 --verify=crc32c --verify_fatal=1 --verify_state_save=0 \
            >/tmp/w.log 2>&1 \
            || { cat /tmp/w.log; echo "WRITER-FAILED $round"; return 1; }
    done
    echo "WRITER-ROUNDS $round"
}
writer >/tmp/writer.out 2>&1 &
writer_pid=$!

# Region A read by the device into memory no CPU writes after, during the copy (on MIGR),
# and compared on the destination (on DONE).
status=0
/dma-reader /dev/vda 32 /dev/vdb || status=$?

touch /tmp/stop
wait $writer_pid || { cat /tmp/writer.out; exit 1; }
cat /tmp/writer.out
[ $status = 0 ] || exit 1
quiet fio $A --verify_only
echo VERIFY-OK
dmesg | grep -i 'i/o error\|blk_update' && echo DMESG-ERRORS || true
"#;

/// The sockets of one side (source or destination) of the migration.
struct Side {
    data: PathBuf,
    mailbox: PathBuf,
}

struct Setup {
    dir: TestDir,
    vm: Vm,
    initrd: PathBuf,
    mailbox_image: PathBuf,
    sides: [Side; 2],
    qemus: usize,
    consoles: Vec<PathBuf>,
    /// Each QEMU's stderr, in the order they started.
    stderrs: Vec<PathBuf>,
}

impl Drop for Setup {
    /// A failed test shows every QEMU's stderr and console (before the directory goes).
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (n, (console, stderr)) in self.consoles.iter().zip(&self.stderrs).enumerate() {
                let read = |path: &Path| {
                    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default())
                        .replace('\r', "")
                };
                print_log(&format!("QEMU {} stderr", n + 1), &read(stderr));
                print_log(&format!("QEMU {} console", n + 1), &read(console));
            }
        }
    }
}

impl Setup {
    fn new(dir: TestDir) -> Setup {
        let sides = [0, 1].map(|i| Side {
            data: dir.join(&format!("data{i}.sock")),
            mailbox: dir.join(&format!("mbox{i}.sock")),
        });
        let mut vm = Vm::new(1);
        vm.timeout = Duration::from_secs(400);
        // Pages are handed to the page cache as they are, never zeroed by a CPU: only the
        // device writes them.
        vm.kernel_args = "init_on_alloc=0 init_on_free=0".into();
        let initrd = dir.join("initrd");
        let reader = build_c(&dir, "dma_reader", &["-pthread"]);
        Vm::initramfs(&script(GUEST), &[("dma-reader", &reader)], &initrd);
        Setup {
            mailbox_image: dir.join("mailbox.img"),
            vm,
            initrd,
            sides,
            qemus: 0,
            consoles: Vec::new(),
            stderrs: Vec::new(),
            dir,
        }
    }

    /// Starts a QEMU on `side`'s sockets; `incoming`: waiting for a migration.
    fn qemu(&mut self, side: usize, incoming: bool) -> (RunningVm, Qmp) {
        self.qemus += 1;
        let n = self.qemus;
        let qmp = self.dir.join(&format!("qmp{n}.sock"));
        let console = self.dir.join(&format!("console{n}.log"));
        let mut vm = Vm::new(self.vm.vcpus);
        vm.timeout = self.vm.timeout;
        vm.kernel_args = self.vm.kernel_args.clone();
        vm = vm
            .disk(&self.sides[side].data, 1)
            .disk(&self.sides[side].mailbox, 1);
        let mut extra = vec![
            "-qmp".to_string(),
            format!("unix:{},server=on,wait=off", qmp.display()),
        ];
        if incoming {
            extra.push("-incoming".into());
            extra.push(format!("unix:{}", self.migration_socket(n).display()));
        }
        let running = vm.start(&self.initrd, &console, &extra);
        self.consoles.push(console);
        self.stderrs.push(running.stderr_file.clone());
        let qmp = Qmp::connect(&qmp);
        (running, qmp)
    }

    fn migration_socket(&self, qemu: usize) -> PathBuf {
        self.dir.join(&format!("migrate{qemu}.sock"))
    }

    fn post(&self, word: &str) {
        let bytes: Vec<u8> = word
            .as_bytes()
            .iter()
            .copied()
            .cycle()
            .take(MAILBOX_BYTES)
            .collect();
        // In place: a truncated file would fail the guest's reads that come at that moment.
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&self.mailbox_image)
            .unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
    }
}

/// What `query-migrate` said at the end (printed for the record).
#[derive(Debug)]
#[allow(dead_code)] // Read through Debug.
struct Migration {
    status: String,
    iterations: u64,
    downtime_ms: u64,
    total_ms: u64,
}

/// Says, from a `query-migrate` answer, whether a held migration may end (it may change the
/// migration's parameters through the QMP connection).
type Hold<'a> = dyn FnMut(&Value, &mut Qmp) -> bool + 'a;

/// How long the guest may be stopped at the switch-over.
const DOWNTIME_MS: u64 = 300;

/// Starts a migration to the QEMU whose number is `to` (`destination` its QMP) and follows it
/// until it ends; a completed one ends when the destination runs the guest. With `hold`, the
/// switch-over waits (a downtime limit no round can meet) until `hold` says the migration may
/// end; `hold` sees each `query-migrate` answer. With `cancel_after`, cancels it once it has
/// been active that long.
fn migrate(
    setup: &Setup,
    source: &mut Qmp,
    destination: &mut Qmp,
    to: usize,
    bandwidth: u64,
    cancel_after: Option<Duration>,
    mut hold: Option<&mut Hold<'_>>,
) -> Migration {
    // 1 ms: a round ends it only if it leaves less than a millisecond's copy, and the guest
    // keeps more pages than that dirty while it must not end (see `guest/dma_reader.c`).
    // (0 would end it at once: QEMU takes "nothing counted yet" for "nothing left".)
    let downtime = if hold.is_some() { 1 } else { DOWNTIME_MS };
    source.execute(
        "migrate-set-parameters",
        json!({ "max-bandwidth": bandwidth, "downtime-limit": downtime }),
    );
    let uri = format!("unix:{}", setup.migration_socket(to).display());
    // The destination listens already (its QMP answered, so its main loop runs). The source
    // refuses while it is itself still an incoming destination: retried until it runs (see
    // `wait_until_running`, which makes this rare).
    let start = Instant::now();
    while let Err(e) = source.try_execute("migrate", json!({ "uri": uri })) {
        assert!(start.elapsed() < Duration::from_secs(30), "migrate: {e}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let start = Instant::now();
    loop {
        let info = source.execute("query-migrate", json!({}));
        let status = info["status"].as_str().unwrap_or("").to_string();
        if status == "active"
            && let Some(f) = hold.as_mut()
            && f(&info, source)
        {
            hold = None;
            source.execute(
                "migrate-set-parameters",
                json!({ "downtime-limit": DOWNTIME_MS, "max-bandwidth": bandwidth }),
            );
        }
        if let Some(after) = cancel_after
            && status == "active"
            && start.elapsed() >= after
        {
            source.execute("migrate_cancel", json!({}));
        }
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
            if status == "completed" {
                wait_until_running(destination);
            }
            let number = |v: &Value| v.as_u64().unwrap_or(0);
            return Migration {
                status,
                iterations: number(&info["ram"]["dirty-sync-count"]),
                downtime_ms: number(&info["downtime"]),
                total_ms: number(&info["total-time"]),
            };
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "migration did not end: {info}"
        );
        std::thread::sleep(Duration::from_millis(if hold.is_some() { 10 } else { 100 }));
    }
}

/// Waits until the destination of a migration the source saw completed runs the guest. The
/// source completes once it has sent the last bytes; the destination then still loads the
/// devices' state and starts them (slowly on a loaded host), and exits if that fails.
fn wait_until_running(destination: &mut Qmp) {
    let start = Instant::now();
    loop {
        let state = destination.execute("query-status", json!({}));
        match state["status"].as_str() {
            Some("running") => {
                eprintln!(
                    "the destination ran the guest {} ms after the source completed",
                    start.elapsed().as_millis()
                );
                return;
            }
            Some("inmigrate") => {}
            _ => panic!("the destination does not run the guest after the migration: {state}"),
        }
        // Only bounds a hang: a destination that fails exits, and its QMP closes.
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the destination still loads the migration: {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What serves the disks.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Vbmq,
    /// vbmq leaving the buffers of reads out of the dirty log (fault injection).
    VbmqUnloggedReads,
    /// Two vbmq processes, one per side (two hosts on shared storage, or an old and a new
    /// vbmq): the image's lock passes from one process to the other.
    VbmqTwoProcesses,
    /// qemu-storage-daemon with an iothread, the reference (its vhost-user-blk export logs
    /// dirty pages through libvhost-user).
    Qsd,
}

/// The backend process(es) of a run: one, or one per side.
struct Served(Vec<Vbmq>);

impl Served {
    fn log_text(&self) -> String {
        self.0
            .iter()
            .map(Vbmq::log_text)
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn stop(self) {
        self.0.into_iter().for_each(Vbmq::stop);
    }
}

fn serve(
    dir: &TestDir,
    sides: &[Side; 2],
    data: &Path,
    mailbox: &Path,
    backend: Backend,
) -> Served {
    match backend {
        Backend::Qsd => Served(vec![serve_qsd(dir, sides, data, mailbox)]),
        Backend::VbmqTwoProcesses => Served(vec![
            serve_vbmq(dir, &sides[..1], data, mailbox, backend, "vbmq-source.log"),
            serve_vbmq(
                dir,
                &sides[1..],
                data,
                mailbox,
                backend,
                "vbmq-destination.log",
            ),
        ]),
        _ => Served(vec![serve_vbmq(
            dir, sides, data, mailbox, backend, "vbmq.log",
        )]),
    }
}

fn serve_vbmq(
    dir: &TestDir,
    sides: &[Side],
    data: &Path,
    mailbox: &Path,
    backend: Backend,
    log: &str,
) -> Vbmq {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("serve").env(
        "RUST_LOG",
        std::env::var("VBMQ_TEST_LOG").unwrap_or("info".into()),
    );
    if backend == Backend::VbmqUnloggedReads {
        cmd.env("VBMQ_FAULT_UNLOGGED_READS", "1");
    }
    let mut sockets = Vec::new();
    for side in sides {
        for (socket, image) in [(&side.data, data), (&side.mailbox, mailbox)] {
            cmd.args([
                "--disk",
                &format!(
                    "socket={},path={},handover=on",
                    socket.display(),
                    image.display()
                ),
            ]);
            sockets.push(socket.clone());
        }
    }
    Vbmq::spawn(cmd, sockets, dir.join(log))
}

/// qemu-storage-daemon exporting each image on both sides' sockets (one node, two exports).
fn serve_qsd(dir: &TestDir, sides: &[Side; 2], data: &Path, mailbox: &Path) -> Vbmq {
    let mut cmd = std::process::Command::new("qemu-storage-daemon");
    cmd.args(["--object", "iothread,id=iot0"]);
    let mut sockets = Vec::new();
    for (node, image) in [("data", data), ("mbox", mailbox)] {
        cmd.args([
            "--blockdev",
            &format!(
                "driver=file,node-name={node},filename={},cache.direct=on,aio=io_uring",
                image.display()
            ),
        ]);
        for (i, side) in sides.iter().enumerate() {
            let socket = if node == "data" {
                &side.data
            } else {
                &side.mailbox
            };
            cmd.args([
                "--export",
                &format!(
                    "type=vhost-user-blk,id={node}{i},node-name={node},addr.type=unix,\
                     addr.path={},writable=on,iothread=iot0",
                    socket.display()
                ),
            ]);
            sockets.push(socket.clone());
        }
    }
    Vbmq::spawn(cmd, sockets, dir.join("qsd.log"))
}

/// Migrates the guest from side 0 to side 1 (capped bandwidth, several rounds); with `full`,
/// then cancels a migration back half-way and migrates back for good. Returns the guest's
/// run and the figures.
fn run(backend: Backend, full: bool) -> (guest::GuestRun, Vec<Migration>, Setup, Served) {
    let dir = TestDir::new("migrate");
    let data = dir.disk("data.img", 64);
    let mut setup = Setup::new(dir);
    setup.post("NONE");
    let vbmq = serve(
        &setup.dir,
        &setup.sides,
        &data,
        &setup.mailbox_image,
        backend,
    );
    let mut figures = Vec::new();

    let (mut source, mut source_qmp) = setup.qemu(0, false);
    wait_for_console(&source.console, "DMA-READY", Duration::from_secs(240));
    let (mut target, mut target_qmp) = setup.qemu(1, true);
    let to = setup.qemus;
    // Once every page has been copied once (and the reader's buffer is clean), the guest
    // reads into it; the migration may end once it has.
    let mut posted = false;
    let mut read_during_copy = |info: &Value, qmp: &mut Qmp| {
        // Sync 2 ends the first round: every page has been copied once, the round now going
        // copies what was written meanwhile (megabytes: long enough to lower the bandwidth).
        if !posted && info["ram"]["dirty-sync-count"].as_u64().unwrap_or(0) >= 2 {
            // 1 MiB/s for 1 ms is less than a page: only a round that finds no page dirty
            // could end it, and the guest's dirtying thread leaves none such.
            qmp.execute(
                "migrate-set-parameters",
                json!({ "max-bandwidth": 1 << 20 }),
            );
            setup.post(MIGRATING);
            posted = true;
        }
        posted && source.console_text().contains("READ-DONE")
    };
    let first = migrate(
        &setup,
        &mut source_qmp,
        &mut target_qmp,
        to,
        16 << 20,
        None,
        Some(&mut read_during_copy),
    );
    eprintln!("migration to the destination: {first:?}");
    assert_eq!(first.status, "completed", "{first:?}\n{}", target.stderr());
    assert!(
        source.console_text().contains("READ-DONE"),
        "the guest's read ended after the switch-over: it did not overlap the copy"
    );
    figures.push(first);
    source_qmp.quit();
    assert!(
        source.wait_exit(Duration::from_secs(30)),
        "source QEMU did not quit"
    );
    drop(source);

    if full {
        // Half-way back, then cancelled: the guest goes on where it is.
        let (_aborted, mut aborted_qmp) = setup.qemu(0, true);
        let to = setup.qemus;
        let cancelled = migrate(
            &setup,
            &mut target_qmp,
            &mut aborted_qmp,
            to,
            4 << 20,
            Some(Duration::from_secs(2)),
            None,
        );
        eprintln!("cancelled migration: {cancelled:?}");
        assert_eq!(cancelled.status, "cancelled", "{cancelled:?}");
        figures.push(cancelled);
        let status = target_qmp.execute("query-status", json!({}));
        assert_eq!(status["status"], "running", "after the cancel: {status}");
        drop(_aborted);

        // And back for good.
        let (back, mut back_qmp) = setup.qemu(0, true);
        let to = setup.qemus;
        let home = migrate(
            &setup,
            &mut target_qmp,
            &mut back_qmp,
            to,
            64 << 20,
            None,
            None,
        );
        eprintln!("migration back: {home:?}");
        assert_eq!(home.status, "completed", "{home:?}\n{}", back.stderr());
        figures.push(home);
        target_qmp.quit();
        assert!(target.wait_exit(Duration::from_secs(30)));
        target = back;
    }

    setup.post(DONE);
    let finished = target.wait_exit(setup.vm.timeout);
    let consoles = read_consoles(&setup.consoles);
    // On failure the consoles and the QEMUs' stderr are printed by `setup`, vbmq's log by `vbmq`.
    let run = result_of(&consoles)
        .unwrap_or_else(|| panic!("no result from the guest (QEMU exited: {finished})"));
    (run, figures, setup, vbmq)
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_migrates_there_and_back_under_io() {
    // The daemon goes first (its log is printed on failure), then the directory.
    let (run, figures, _setup, vbmq) = run(Backend::Vbmq, true);
    run.assert_success();
    assert_eq!(tagged(&run.output, "VERIFY-OK").len(), 1, "{}", run.console);
    assert_eq!(
        tagged(&run.output, "DMA-STALE-PAGES"),
        ["0"],
        "{}",
        run.console
    );
    run.assert_no_io_errors();
    assert!(
        figures[0].iterations >= 3,
        "the first migration took {} rounds: the test is for several",
        figures[0].iterations
    );
    assert!(
        vbmq.log_text().contains("dirty page logging on"),
        "{}",
        vbmq.log_text()
    );
    vbmq.stop();
}

/// The same first migration with the buffers of reads left out of the log (fault injection):
/// the reader finds its pages stale on the destination. The test above can catch a missing
/// log.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn unlogged_reads_arrive_stale() {
    let (run, _figures, _setup, _vbmq) = run(Backend::VbmqUnloggedReads, false);
    assert_ne!(
        run.status, 0,
        "the guest saw no stale page:\n{}",
        run.console
    );
    let stale = tagged(&run.output, "DMA-STALE-PAGES");
    assert!(
        stale.len() == 1 && stale[0] != "0",
        "expected stale pages: {stale:?}\n{}",
        run.console
    );
}

/// The same migrations with qemu-storage-daemon serving the disks: the reference the figures
/// printed above are compared with (BENCHMARKS.md), and a check that the test's guest side
/// holds for a backend other than vbmq.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn qemu_storage_daemon_migrates_the_same_guest() {
    let (run, _figures, _setup, _qsd) = run(Backend::Qsd, true);
    run.assert_success();
    assert_eq!(
        tagged(&run.output, "DMA-STALE-PAGES"),
        ["0"],
        "{}",
        run.console
    );
    assert_eq!(tagged(&run.output, "VERIFY-OK").len(), 1, "{}", run.console);
}

/// The migration between two vbmq processes on one image (as between two hosts on shared
/// storage): the source process gives the image's lock back when QEMU stops the source's
/// rings, and the destination process takes it at its first write.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_migrates_between_two_vbmq_processes() {
    let (run, _figures, _setup, served) = run(Backend::VbmqTwoProcesses, true);
    // With VBMQ_TEST_LOG=vbmq=debug: how long each ring stop (GET_VRING_BASE) took.
    for line in served
        .log_text()
        .lines()
        .filter(|l| l.contains(" stopped in "))
    {
        eprintln!("{line}");
    }
    run.assert_success();
    assert_eq!(
        tagged(&run.output, "DMA-STALE-PAGES"),
        ["0"],
        "{}",
        run.console
    );
    assert_eq!(tagged(&run.output, "VERIFY-OK").len(), 1, "{}", run.console);
    served.stop();
}
