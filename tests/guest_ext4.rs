//! Filesystem and discard workloads from a Linux guest, and data surviving into a second VM.

mod guest;

use guest::{TestDir, Vbmq, Vm, disk_spec, reread_sums, script, tagged, tagged_one};
use std::os::unix::fs::MetadataExt;

const DISK_MIB: u64 = 128;
const DISCARD_MIB: u64 = 64;

/// The first VM makes an ext4 filesystem, writes files, syncs, unmounts, checks it with
/// `e2fsck -fn`, remounts and checks every file's sha256. It powers off; a second VM on the same
/// vbmq process checks the filesystem and the sums again. Afterwards the host's e2fsck agrees.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn ext4_survives_fsck_remount_and_a_second_vm() {
    let dir = TestDir::new("ext4");
    let image = dir.disk("ext4.img", DISK_MIB);
    let socket = dir.join("ext4.sock");
    let vbmq = Vbmq::serve(
        &[disk_spec(&socket, &image, ",queues=2")],
        dir.join("vbmq.log"),
    );
    let first = Vm::new(2).disk(&socket, 2).run(&script(
        "mkfs.ext4 -q /dev/vda
         mount /dev/vda /mnt
         mkdir /mnt/dir
         for i in 1 2 3 4 5 6; do
             dd if=/dev/urandom of=/mnt/dir/file$i bs=64k count=$((i * 16)) 2>/dev/null
         done
         seq 1 20000 >/mnt/small
         (cd /mnt && sha256sum small dir/* >/sums)
         sync
         umount /mnt
         e2fsck -fn /dev/vda
         mount /dev/vda /mnt
         (cd /mnt && sha256sum -c /sums)
         cp /sums /mnt/sums
         umount /mnt
         sed 's/^/SUM /' /sums",
    ));
    first.assert_success();
    let second = reread_sums(&socket);
    let sums = tagged(&first.output, "SUM");
    assert_eq!(sums.len(), 7, "{}", first.output);
    assert_eq!(sums, tagged(&second.output, "SUM"));
    vbmq.stop();

    let fsck = std::process::Command::new("e2fsck")
        .arg("-fn")
        .arg(&image)
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "host e2fsck: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

/// `blkdiscard` (discard) and `blkdiscard -z` (write zeroes) over a disk full of 0xff bytes
/// leave only zeros to read, and `fstrim` on ext4 gives the image's blocks back to the host.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn discard_and_fstrim_read_back_zeros() {
    let dir = TestDir::new("discard");
    let image = dir.disk("discard.img", DISCARD_MIB);
    let socket = dir.join("discard.sock");
    let vbmq = Vbmq::serve(&[disk_spec(&socket, &image, "")], dir.join("vbmq.log"));
    let run = Vm::new(2).disk(&socket, 1).run(&script(
        "echo \"DISCARD-MAX $(cat /sys/block/vda/queue/discard_max_bytes)\"
         echo \"ZEROES-MAX $(cat /sys/block/vda/queue/write_zeroes_max_bytes)\"
         fill /dev/vda 0xff
         holds /dev/vda 0xff && echo 'FILLED yes'
         blkdiscard /dev/vda
         holds /dev/vda 0 && echo 'DISCARDED zeros'
         fill /dev/vda 0xff
         blkdiscard -z /dev/vda
         holds /dev/vda 0 && echo 'ZEROED zeros'
         fill /dev/vda 0xff
         mkfs.ext4 -q -E nodiscard /dev/vda
         mount /dev/vda /mnt
         fstrim -v /mnt
         umount /mnt
         e2fsck -fn /dev/vda",
    ));
    run.assert_success();
    let out = &run.output;
    assert_ne!(
        tagged_one(out, "DISCARD-MAX"),
        "0",
        "no discard support: {out}"
    );
    assert_ne!(
        tagged_one(out, "ZEROES-MAX"),
        "0",
        "no write-zeroes support: {out}"
    );
    assert_eq!(tagged_one(out, "FILLED"), "yes");
    assert_eq!(tagged_one(out, "DISCARDED"), "zeros");
    assert_eq!(tagged_one(out, "ZEROED"), "zeros");
    vbmq.stop();
    // Before fstrim the whole image was written; afterwards only ext4's metadata stays allocated.
    let allocated = std::fs::metadata(&image).unwrap().blocks() * 512;
    assert!(
        allocated < (DISCARD_MIB << 20) / 4,
        "{allocated} bytes still allocated after fstrim:\n{out}"
    );
}
