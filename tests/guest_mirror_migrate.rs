//! Live migration of a running Linux guest whose disk is on the source host's own storage: two
//! vbmq processes, two images, nothing shared. The destination's vbmq serves its (empty) image
//! as a writable NBD export; the source's vbmq mirrors the guest's disk into it
//! (`mirror-begin --wait-ready`) while the guest writes; QEMU then migrates the guest to a
//! destination QEMU on the destination's vbmq, as libvirt's `--copy-storage-all` does: the
//! destination QEMU waits paused (`-S`), the mirror ends once the source's rings have stopped,
//! then the destination runs (its first ring ends the export).
//!
//! The guest writes the whole data region again and again, each round its own pattern (its
//! number and each block's offset), and reads every block back and checks it (fio
//! `verify=pattern`): a round that reads, on either side, a block the mirror lost or left stale
//! (another round's) fails. After the guest's last round, fio on the
//! host checks the destination's image holds exactly that round, and the part the guest never
//! wrote is the source's.
//!
//! Only the mailbox (how the host tells the guest to stop) is one image on both sides.

mod guest;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use guest::tool::run_command;
use guest::{Qmp, RunningVm, TestDir, Vbmq, Vm, print_log, read_consoles, result_of, script};

const DATA_MIB: u64 = 64;
/// The region the guest writes; the rest keeps the source's pattern.
const WRITTEN_MIB: u64 = 32;
const MAILBOX_BYTES: usize = 1 << 20;
const DONE: &str = "DONE";

const GUEST: &str = r#"
round=0
while :; do
    round=$((round + 1))
    fio --name=round --filename=/dev/vda --size=32M --bs=64k --rw=write --ioengine=libaio \
        --iodepth=8 --direct=1 --verify=pattern --verify_pattern=0x$(printf %08x $round)%o \
        --verify_fatal=1 --verify_state_save=0 >/tmp/round.log 2>&1 \
        || { cat /tmp/round.log; echo "ROUND-FAILED $round"; exit 1; }
    echo "ROUND-OK $round"
    # The mailbox is read from the device, not from the page cache.
    sync
    echo 3 >/proc/sys/vm/drop_caches
    [ "$(head -c 4 /dev/vdb)" = DONE ] && break
done
echo "LAST-ROUND $round"
dmesg | grep -i 'i/o error\|blk_update' && echo DMESG-ERRORS || true
"#;

/// `vbmq ctl --control CONTROL ARGS`: its JSON answer; panics if it fails.
fn ctl(control: &Path, args: &[&str]) -> Value {
    let out = run_command(
        Command::new(env!("CARGO_BIN_EXE_vbmq"))
            .arg("ctl")
            .arg("--control")
            .arg(control)
            .args(args),
    );
    serde_json::from_str(&out).unwrap_or(Value::Null)
}

/// A `vbmq serve` with a control socket and `disks`.
fn serve(dir: &TestDir, name: &str, disks: &[(&Path, &Path, &str)]) -> (Vbmq, PathBuf) {
    let control = dir.join(&format!("{name}.ctl"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("serve")
        .arg("--control")
        .arg(&control)
        .env("RUST_LOG", "info");
    let mut sockets = vec![control.clone()];
    for (socket, image, extra) in disks {
        cmd.args([
            "--disk",
            &format!(
                "socket={},path={}{extra}",
                socket.display(),
                image.display()
            ),
        ]);
        sockets.push(socket.to_path_buf());
    }
    (
        Vbmq::spawn(cmd, sockets, dir.join(&format!("{name}.log"))),
        control,
    )
}

/// Writes `word` over the whole mailbox image, in place.
fn post(mailbox: &Path, word: &str) {
    let bytes: Vec<u8> = word.bytes().cycle().take(MAILBOX_BYTES).collect();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(mailbox)
        .unwrap();
    std::io::Write::write_all(&mut file, &bytes).unwrap();
}

/// The highest `ROUND-OK` number in `console` (0: none).
fn rounds_done(console: &str) -> u64 {
    guest::tagged(console, "ROUND-OK")
        .iter()
        .filter_map(|n| n.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Waits until `console`'s guest has finished round `round`; panics if a round fails or after
/// `timeout` (only against a hang).
fn wait_round(vm: &RunningVm, round: u64, timeout: Duration) {
    let start = Instant::now();
    loop {
        let text = vm.console_text();
        assert!(!text.contains("ROUND-FAILED"), "a round failed:\n{text}");
        if rounds_done(&text) >= round {
            return;
        }
        assert!(
            start.elapsed() < timeout,
            "the guest never finished round {round}:\n{text}\n{}",
            vm.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until QMP's `query-status` says `wanted`, in which `passing` states may come first.
fn wait_status(qmp: &mut Qmp, wanted: &str, passing: &[&str]) {
    let start = Instant::now();
    loop {
        let state = qmp.execute("query-status", json!({}));
        let status = state["status"].as_str().unwrap_or("");
        if status == wanted {
            return;
        }
        assert!(passing.contains(&status), "QEMU is {state}, not {wanted}");
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "QEMU still {state}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// fio's `verify_pattern` of round `round` (as the guest's script makes it): the round's
/// number, then each block's offset, so a block of another round or offset fails.
fn round_pattern(round: &str) -> String {
    format!("0x{:08x}%o", round.parse::<u32>().expect("a round number"))
}

/// The image file of `mib` MiB at `path` whose every byte is its offset's, modulo 251.
fn patterned(path: &Path, mib: u64) {
    let bytes: Vec<u8> = (0..mib << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(path, bytes).unwrap();
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_on_a_local_disk_migrates_with_its_disk_mirrored() {
    let dir = TestDir::new("mirror-migrate");
    let (src_image, dst_image) = (dir.join("src.img"), dir.disk("dst.img", DATA_MIB));
    patterned(&src_image, DATA_MIB);
    let mailbox = dir.join("mailbox.img");
    post(&mailbox, "NONE");
    let (src_sock, dst_sock) = (dir.join("src.sock"), dir.join("dst.sock"));
    let (mbox0, mbox1) = (dir.join("mbox0.sock"), dir.join("mbox1.sock"));
    let handover = ",handover=on";
    let (source_vbmq, source_ctl) = serve(
        &dir,
        "vbmq-source",
        &[
            (&src_sock, &src_image, ""),
            (&mbox0, &mailbox, handover),
            (&mbox1, &mailbox, handover),
        ],
    );
    let (destination_vbmq, destination_ctl) =
        serve(&dir, "vbmq-destination", &[(&dst_sock, &dst_image, "")]);
    let export = dir.join("dst.nbd");
    let address = format!("unix:{}", export.display());
    ctl(
        &destination_ctl,
        &[
            "export-begin",
            &dst_sock.to_string_lossy(),
            &address,
            "--writable",
        ],
    );

    let initrd = dir.join("initrd");
    Vm::initramfs(&script(GUEST), &[], &initrd);
    let mut vm = Vm::new(1);
    vm.timeout = Duration::from_secs(400);
    let qemu = |n: u32, data: &Path, mbox: &Path, extra: &[String]| {
        let qmp = dir.join(&format!("qmp{n}.sock"));
        let mut args = vec![
            "-qmp".to_string(),
            format!("unix:{},server=on,wait=off", qmp.display()),
        ];
        args.extend_from_slice(extra);
        let console = dir.join(&format!("console{n}.log"));
        let running = Vm::new(vm.vcpus)
            .disk(data, 1)
            .disk(mbox, 1)
            .start(&initrd, &console, &args);
        (running, Qmp::connect(&qmp), console)
    };
    let (source, mut source_qmp, console1) = qemu(1, &src_sock, &mbox0, &[]);
    let consoles = [console1, dir.join("console2.log")];
    let show_logs = |why: &str| {
        for (n, text) in read_consoles(&consoles).iter().enumerate() {
            print_log(&format!("console {} ({why})", n + 1), text);
        }
    };
    wait_round(&source, 1, Duration::from_secs(300));

    // The mirror, under the guest's rounds.
    let src = src_sock.to_string_lossy().to_string();
    let uri = format!("nbd+unix:///?socket={}", export.display());
    let ready = ctl(&source_ctl, &["mirror-begin", &src, &uri, "--wait-ready"]);
    assert_eq!(ready["state"], "ready", "{ready}");
    let before_migration = rounds_done(&source.console_text());
    wait_round(&source, before_migration + 1, Duration::from_secs(300));

    // The destination waits paused, as libvirt starts it.
    let migration = dir.join("migrate.sock");
    let (mut destination, mut destination_qmp, _) = qemu(
        2,
        &dst_sock,
        &mbox1,
        &[
            "-S".into(),
            "-incoming".into(),
            format!("unix:{}", migration.display()),
        ],
    );
    source_qmp.execute(
        "migrate-set-parameters",
        json!({ "max-bandwidth": 1u64 << 30, "downtime-limit": 300 }),
    );
    source_qmp.execute(
        "migrate",
        json!({ "uri": format!("unix:{}", migration.display()) }),
    );
    let start = Instant::now();
    let info = loop {
        let info = source_qmp.execute("query-migrate", json!({}));
        match info["status"].as_str() {
            Some("completed") => break info,
            Some("failed" | "cancelled") => {
                show_logs("migration failed");
                panic!("migration: {info}\n{}", destination.stderr());
            }
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "migration never ended: {info}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "migration: {} ms, downtime {} ms",
        info["total-time"], info["downtime"]
    );
    // The source's rings are stopped: every write its guest was told is done is on the
    // destination. The mirror ends (flushed, disconnected), then the destination runs.
    let ended = ctl(&source_ctl, &["mirror-end", &src]);
    assert_eq!(ended["state"], "ready", "{ended}");
    wait_status(&mut destination_qmp, "paused", &["inmigrate", "prelaunch"]);
    destination_qmp.execute("cont", json!({}));
    wait_status(&mut destination_qmp, "running", &["paused"]);
    source_qmp.quit();
    drop(source);

    // A whole round on the destination, then the guest stops.
    let after_migration = rounds_done(&destination.console_text());
    wait_round(&destination, after_migration + 2, Duration::from_secs(300));
    post(&mailbox, DONE);
    if !destination.wait_exit(vm.timeout) {
        show_logs("the guest did not end");
        panic!("the guest did not end");
    }
    let run = result_of(&read_consoles(&consoles)).unwrap_or_else(|| {
        show_logs("no result");
        panic!("no result from the guest")
    });
    if run.status != 0 {
        show_logs("the guest failed");
    }
    run.assert_success();
    run.assert_no_io_errors();
    let last = guest::tagged_one(&run.output, "LAST-ROUND").to_string();
    destination_vbmq.stop();
    source_vbmq.stop();

    // The destination's image: the guest's last round, then the source's pattern.
    let check = Command::new("fio")
        .args([
            "--name=round",
            "--size=32M",
            "--bs=64k",
            "--rw=write",
            "--verify=pattern",
            "--verify_only",
            "--verify_state_save=0",
            "--verify_fatal=1",
        ])
        .arg(format!("--verify_pattern={}", round_pattern(&last)))
        .arg(format!("--filename={}", dst_image.display()))
        .output()
        .expect("run fio");
    assert!(
        check.status.success() && !String::from_utf8_lossy(&check.stdout).contains("bad"),
        "the destination's image is not round {last}:\n{}\n{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let (src_bytes, dst_bytes) = (
        std::fs::read(&src_image).unwrap(),
        std::fs::read(&dst_image).unwrap(),
    );
    let unwritten = (WRITTEN_MIB << 20) as usize;
    assert!(
        src_bytes[unwritten..] == dst_bytes[unwritten..],
        "the part the guest never wrote differs from the source's"
    );
}
