//! Live migration of a running Linux guest whose disks vbmq serves: the source VM's disks on
//! one pair of sockets, the destination's (`-incoming`) on another pair of the same images, in
//! one vbmq process (shared storage: the images are not copied). QEMU copies guest memory
//! while the guest runs, again and again for the pages written since; the pages vbmq writes
//! (data of reads, status bytes, used rings) reach the destination only through vbmq's dirty
//! log.
//!
//! The guest reads a region it wrote earlier into its page cache while the migration copies
//! memory (cache pages are written by the device only, never by a CPU), and checks every
//! block from that cache after the move: a page vbmq failed to log arrives stale. A writer
//! with its own verification runs throughout. The test also cancels a migration half-way and
//! migrates back.

mod guest;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use guest::{Qmp, RunningVm, TestDir, Vbmq, Vm, result_of, script, tagged, wait_for_console};

/// Words the host writes over the whole mailbox disk; the guest polls it.
const MIGRATING: &str = "MIGR";
const DONE: &str = "DONE";
const MAILBOX_BYTES: usize = 1 << 20;

const GUEST: &str = r#"
# Region A (the first 32 MiB) written with checksummed blocks before any migration.
A="--name=a --filename=/dev/vda --size=32M --bs=64k --rw=write --verify=crc32c \
    --verify_state_save=0 --ioengine=libaio --iodepth=8"
quiet fio $A --direct=1 --do_verify=0
echo 3 >/proc/sys/vm/drop_caches

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

# wait_for WORD: until the mailbox's first sector starts with WORD.
wait_for() {
    while [ "$(dd if=/dev/vdb bs=512 count=1 iflag=direct 2>/dev/null | head -c 4)" != "$1" ]; do
        sleep 0.2
    done
}

echo GUEST-READY
wait_for MIGR
# Into the page cache, by the device, while memory is being copied.
dd if=/dev/vda of=/dev/null bs=64k count=512 2>/dev/null
echo READ-DONE
wait_for DONE

touch /tmp/stop
wait $writer_pid || { cat /tmp/writer.out; exit 1; }
cat /tmp/writer.out
# From the page cache filled during the migration...
if ! fio $A --direct=0 --invalidate=0 --verify_only >/tmp/v.log 2>&1; then
    grep -m 5 -i 'verify\|bad\|crc' /tmp/v.log || cat /tmp/v.log
    echo "CACHE-STALE"
    exit 1
fi
# ...and from the disk.
echo 3 >/proc/sys/vm/drop_caches
quiet fio $A --direct=1 --verify_only
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
        Vm::initramfs(&script(GUEST), &initrd);
        Setup {
            mailbox_image: dir.join("mailbox.img"),
            vm,
            initrd,
            sides,
            qemus: 0,
            consoles: Vec::new(),
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

/// How long the guest may be stopped at the switch-over.
const DOWNTIME_MS: u64 = 300;

/// Starts a migration to the QEMU whose number is `to` and follows it until it ends. With
/// `hold`, the switch-over waits (a downtime limit no round can meet) until `hold` says the
/// migration may end; `hold` sees each `query-migrate` answer. With `cancel_after`, cancels it
/// once it has been active that long.
fn migrate(
    setup: &Setup,
    source: &mut Qmp,
    to: usize,
    bandwidth: u64,
    cancel_after: Option<Duration>,
    mut hold: Option<&mut dyn FnMut(&Value) -> bool>,
) -> Migration {
    let downtime = if hold.is_some() { 1 } else { DOWNTIME_MS };
    source.execute(
        "migrate-set-parameters",
        json!({ "max-bandwidth": bandwidth, "downtime-limit": downtime }),
    );
    let uri = format!("unix:{}", setup.migration_socket(to).display());
    // The destination listens as soon as its QEMU runs; retried until it does.
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
            && f(&info)
        {
            hold = None;
            source.execute(
                "migrate-set-parameters",
                json!({ "downtime-limit": DOWNTIME_MS }),
            );
        }
        if let Some(after) = cancel_after
            && status == "active"
            && start.elapsed() >= after
        {
            source.execute("migrate_cancel", json!({}));
        }
        if matches!(status.as_str(), "completed" | "failed" | "cancelled") {
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
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn serve(dir: &TestDir, sides: &[Side; 2], data: &Path, mailbox: &Path) -> Vbmq {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("serve").env("RUST_LOG", "info");
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
    Vbmq::spawn(cmd, sockets, dir.join("vbmq.log"))
}

/// Migrates the guest from side 0 to side 1 (capped bandwidth, several rounds), cancels a
/// migration back half-way, then migrates back for good; returns the consoles and figures.
fn run() -> (guest::GuestRun, Vec<Migration>, Setup, Vbmq) {
    let dir = TestDir::new("migrate");
    let data = dir.disk("data.img", 64);
    let mut setup = Setup::new(dir);
    setup.post("NONE");
    let vbmq = serve(&setup.dir, &setup.sides, &data, &setup.mailbox_image);
    let mut figures = Vec::new();

    let (mut source, mut source_qmp) = setup.qemu(0, false);
    wait_for_console(&source.console, "GUEST-READY", Duration::from_secs(240));
    let (mut target, mut target_qmp) = setup.qemu(1, true);
    let to = setup.qemus;
    // Once every page has been copied once, the guest reads into its page cache; the
    // migration may end once it has.
    let mut posted = false;
    let mut read_during_copy = |info: &Value| {
        if !posted && info["ram"]["dirty-sync-count"].as_u64().unwrap_or(0) >= 3 {
            setup.post(MIGRATING);
            posted = true;
        }
        posted && source.console_text().contains("READ-DONE")
    };
    let first = migrate(
        &setup,
        &mut source_qmp,
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
    source_qmp.execute("quit", json!({}));
    assert!(
        source.wait_exit(Duration::from_secs(30)),
        "source QEMU did not quit"
    );
    drop(source);

    // Half-way back, then cancelled: the guest goes on where it is.
    let (_aborted, _aborted_qmp) = setup.qemu(0, true);
    let to = setup.qemus;
    let cancelled = migrate(
        &setup,
        &mut target_qmp,
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
    let (back, _back_qmp) = setup.qemu(0, true);
    let to = setup.qemus;
    let home = migrate(&setup, &mut target_qmp, to, 64 << 20, None, None);
    eprintln!("migration back: {home:?}");
    assert_eq!(home.status, "completed", "{home:?}\n{}", back.stderr());
    figures.push(home);
    target_qmp.execute("quit", json!({}));
    assert!(target.wait_exit(Duration::from_secs(30)));
    target = back;

    setup.post(DONE);
    let finished = target.wait_exit(setup.vm.timeout);
    let consoles: Vec<String> = setup
        .consoles
        .iter()
        .map(|c| {
            std::fs::read_to_string(c)
                .unwrap_or_default()
                .replace('\r', "")
        })
        .collect();
    let run = result_of(&consoles).unwrap_or_else(|| {
        panic!(
            "no result from the guest (exited: {finished}); consoles:\n{}\n{}",
            consoles.join("\n=====\n"),
            vbmq.log_text()
        )
    });
    (run, figures, setup, vbmq)
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_migrates_there_and_back_under_io() {
    // The daemon goes first (its log is printed on failure), then the directory.
    let (run, figures, _setup, vbmq) = run();
    run.assert_success();
    assert_eq!(tagged(&run.output, "VERIFY-OK").len(), 1, "{}", run.console);
    assert!(
        tagged(&run.output, "DMESG-ERRORS").is_empty(),
        "{}",
        run.console
    );
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
