//! A guest on a qcow2 overlay over a qcow2 base, both made by `qemu-img`: it reads the base's
//! file system, writes and trims its own files on top, and a second VM finds them; the base
//! never changes and `qemu-img check` finds the overlay clean.

mod common;
mod guest;

use common::sha256;
use common::tool::{qcow2_over, run_tool as run};
use guest::{TestDir, Vbmq, Vm, disk_spec, golden_ext4, reread_sums, tagged, write_on_golden};

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_writes_on_a_qcow2_overlay_over_a_qcow2_base() {
    let dir = TestDir::new("qcow2");
    let (ext4, golden) = golden_ext4(&dir, "golden.raw", 128);
    // The base compressed, as distributions publish their cloud images.
    let base = dir.join("golden.qcow2");
    run(
        "qemu-img",
        &[
            "convert",
            "-c",
            "-f",
            "raw",
            "-O",
            "qcow2",
            ext4.to_str().unwrap(),
            base.to_str().unwrap(),
        ],
    );
    let overlay = dir.join("vm.qcow2");
    qcow2_over(&overlay, "qcow2", "golden.qcow2", &[]);
    let base_sum = sha256(&base);
    let golden_sum = sha256(&golden);
    let socket = dir.join("qcow2.sock");
    let vbmq = Vbmq::serve(
        &[disk_spec(&socket, &overlay, ",queues=2")],
        dir.join("vbmq.log"),
    );
    let first = Vm::new(2)
        .disk(&socket, 2)
        .run(&write_on_golden("rm /mnt/own/file2"));
    first.assert_success();
    let second = reread_sums(&socket);
    vbmq.stop();
    let golden = tagged(&first.output, "GOLDEN");
    assert!(
        golden.iter().any(|l| l.starts_with(&golden_sum)),
        "the guest read the base's file: {golden:?}"
    );
    assert_eq!(
        tagged(&first.output, "SUM"),
        tagged(&second.output, "SUM"),
        "the second VM found what the first wrote"
    );
    assert_eq!(sha256(&base), base_sum, "the base changed");
    run("qemu-img", &["check", overlay.to_str().unwrap()]);
}
