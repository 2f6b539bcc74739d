//! A snapshot under a guest's writes: the guest writes rounds of generation-stamped blocks,
//! each ending with a flush, and says on its console when each round starts and is done; the
//! host takes a snapshot mid-load. The snapshot holds every round done before the command and
//! none started after it returned, and is one instant of the guest's writes, block by block.

mod common;
mod guest;
#[path = "common/stamps.rs"]
mod stamps;

use std::path::Path;
use std::time::Duration;

use common::ctl::ok;
use common::{ctl, s};
use guest::{TestDir, Vbmq, Vm, build_c, disk_spec, result_of, script, tagged, wait_for_console};
use stamps::{check_one_instant, stamped_image};

/// Blocks the guest writes: the whole disk (8 MiB).
const BLOCKS: u64 = 2048;
const ROUNDS: u64 = 8;

/// The highest round the console shows with `tag` (0: none).
fn last_round(console: &Path, tag: &str) -> u64 {
    let text = std::fs::read_to_string(console).unwrap_or_default();
    tagged(&text.replace('\r', ""), tag)
        .iter()
        .filter_map(|n| n.parse().ok())
        .max()
        .unwrap_or(0)
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_snapshot_under_a_guests_writes_holds_the_rounds_done_before_it() {
    let dir = TestDir::new("snapshot");
    let image = dir.join("disk.raw");
    stamped_image(&image, BLOCKS);
    let socket = dir.join("disk.sock");
    let control = dir.join("ctl.sock");
    let spec = disk_spec(&socket, &image, "");
    let vbmq = Vbmq::serve_controlled(&control, &[spec], dir.join("vbmq.log"));
    let writer = build_c(&dir, "stamp_writer", &[]);
    let initrd = dir.join("initrd");
    Vm::initramfs(
        &script(&format!("/stamp-writer /dev/vda {BLOCKS} {ROUNDS}")),
        &[("stamp-writer", &writer)],
        &initrd,
    );
    let console = dir.join("console.log");
    let vm = Vm::new(1).disk(&socket, 1);
    let mut running = vm.start(&initrd, &console, &[]);
    wait_for_console(&console, "ROUND-DONE 2", Duration::from_secs(300));
    let done_before = last_round(&console, "ROUND-DONE");
    let snapshot = dir.join("snapshot.raw");
    let out = ctl(&control, &["snapshot", s(&socket), s(&snapshot)]);
    // The console is read after the reply: a round it does not show started after it.
    let started_by = last_round(&console, "ROUND-START");
    ok(&out);
    assert!(running.wait_exit(vm.timeout), "the guest did not finish");
    let text = running.console_text();
    let run = result_of(&[text]).expect("the guest's exit status");
    run.assert_success();
    vbmq.stop();
    eprintln!(
        "snapshot {}; rounds done before {done_before}, started by the reply {started_by}",
        String::from_utf8_lossy(&out.stdout).replace('\n', " ")
    );
    assert!(
        started_by < ROUNDS,
        "the guest had finished before the reply: the snapshot was not taken mid-load"
    );
    // Every write of the rounds done was started, none of the rounds not started was.
    let (low, high) = ((done_before + 1) * BLOCKS, (started_by + 1) * BLOCKS);
    let (from, to) = check_one_instant(&snapshot, BLOCKS, low, high);
    eprintln!("the snapshot's instant: between writes {from} and {to}");
}
