//! A backup restored into a new disk serves a real guest: a first guest makes an ext4 file
//! system and writes files on a vbmq disk; the host reads the disk through `vbmq ctl
//! export-begin` with `nbdcopy` (the backup) into a new image; a second guest, on another vbmq
//! serving only that image, checks the file system with `e2fsck` and every file's sum.

mod common;
mod guest;

use common::ctl::{ctl_json, ctl_json_or_null, s};
use common::tool::{nbd_uri, run_tool};
use guest::{TestDir, Vbmq, Vm, disk_spec, reread_sums, script, tagged};

const DISK_MIB: u64 = 64;

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_backup_restored_into_a_new_disk_serves_a_guest_its_files() {
    let dir = TestDir::new("restore");
    let image = dir.disk("disk.img", DISK_MIB);
    let socket = dir.join("disk.sock");
    let control = dir.join("ctl.sock");
    let spec = disk_spec(&socket, &image, "");
    let vbmq = Vbmq::serve_controlled(&control, &[spec], dir.join("vbmq.log"));
    let first = Vm::new(2).disk(&socket, 1).run(&script(
        "mkfs.ext4 -q /dev/vda
         mount /dev/vda /mnt
         mkdir /mnt/dir
         for i in 1 2 3 4; do
             dd if=/dev/urandom of=/mnt/dir/file$i bs=64k count=$((i * 16)) 2>/dev/null
         done
         seq 1 20000 >/mnt/small
         (cd /mnt && sha256sum small dir/* >sums && cp sums /sums)
         umount /mnt
         sed 's/^/SUM /' /sums",
    ));
    first.assert_success();
    let sums = tagged(&first.output, "SUM");
    assert_eq!(sums.len(), 5, "{}", first.output);

    // The backup: the disk served by vbmq, read through its export by a stock client.
    let export = dir.join("export.sock");
    let address = format!("unix:{}", s(&export));
    ctl_json(&control, &["export-begin", s(&socket), &address]);
    let restored = dir.join("restored.img");
    run_tool("nbdcopy", &[nbd_uri(&export), s(&restored).to_string()]);
    ctl_json_or_null(&control, &["export-end", s(&socket), &address]);
    vbmq.stop();
    assert_eq!(
        std::fs::metadata(&restored).map(|m| m.len()).ok(),
        Some(DISK_MIB << 20),
        "the restored image has the disk's size"
    );

    // The restore, served by another vbmq to another guest: nothing of the first disk is used.
    let restored_socket = dir.join("restored.sock");
    let second_vbmq = Vbmq::serve(
        &[disk_spec(&restored_socket, &restored, ",queues=2")],
        dir.join("vbmq-restored.log"),
    );
    let second = reread_sums(&restored_socket);
    second_vbmq.stop();
    assert_eq!(sums, tagged(&second.output, "SUM"));
}
