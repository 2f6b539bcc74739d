//! A guest on a qcow2 overlay over a qcow2 base, both made by `qemu-img`: it reads the base's
//! file system, writes and trims its own files on top, and a second VM finds them; the base
//! never changes and `qemu-img check` finds the overlay clean.

mod common;
mod guest;

use common::sha256;
use guest::{TestDir, Vbmq, Vm, script, tagged};
use std::process::Command;

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_writes_on_a_qcow2_overlay_over_a_qcow2_base() {
    let dir = TestDir::new("qcow2");
    let content = dir.join("content");
    std::fs::create_dir_all(&content).unwrap();
    let text: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    std::fs::write(content.join("golden.txt"), &text).unwrap();
    let ext4 = dir.disk("golden.raw", 128);
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-d",
            content.to_str().unwrap(),
            ext4.to_str().unwrap(),
        ],
    );
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
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            "golden.qcow2",
            overlay.to_str().unwrap(),
        ],
    );
    let base_sum = sha256(&base);
    let golden_sum = sha256(&content.join("golden.txt"));
    let socket = dir.join("qcow2.sock");
    let vbmq = Vbmq::serve(
        &[format!(
            "socket={},path={},queues=2",
            socket.display(),
            overlay.display()
        )],
        dir.join("vbmq.log"),
    );
    let first = Vm::new(2).disk(&socket, 2).run(&script(
        "e2fsck -fn /dev/vda
         mount /dev/vda /mnt
         sha256sum /mnt/golden.txt | sed 's/^/GOLDEN /'
         mkdir /mnt/own
         for i in 1 2 3 4; do
             dd if=/dev/urandom of=/mnt/own/file$i bs=64k count=$((i * 8)) 2>/dev/null
         done
         rm /mnt/own/file2
         echo appended >>/mnt/golden.txt
         (cd /mnt && sha256sum golden.txt own/* >/sums)
         cp /sums /mnt/sums
         sync
         fstrim -v /mnt
         umount /mnt
         e2fsck -fn /dev/vda
         sed 's/^/SUM /' /sums",
    ));
    first.assert_success();
    let second = Vm::new(2).disk(&socket, 2).run(&script(
        "e2fsck -fn /dev/vda
         mount -o ro /dev/vda /mnt
         (cd /mnt && sha256sum -c sums && sed 's/^/SUM /' sums)
         umount /mnt",
    ));
    second.assert_success();
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
