//! A Linux guest on an image that lives on a file system whose device has 4096-byte sectors,
//! served with O_DIRECT (the default): SeaBIOS probes it with 512-byte reads, then fio writes
//! and verifies it through libaio and io_uring.

mod common;
mod guest;

use common::loop_device::FourKn;
use guest::{TestDir, Vbmq, Vm, disk_spec, script, tagged};

#[test]
#[cfg_attr(
    not(all(feature = "guest-tests", feature = "root-tests")),
    ignore = "needs feature guest-tests and root-tests: QEMU 10, a guest kernel, root for loop devices (scripts/test.sh)"
)]
fn fio_verify_passes_on_an_image_on_a_4096_byte_sector_file_system() {
    let dir = TestDir::new("4kn");
    let fs = FourKn::new(&dir.join("4kn.raw"));
    let image = fs.mount.path().join("vm.raw");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(48 << 20)
        .unwrap();
    let socket = dir.join("4kn.sock");
    let disk = disk_spec(&socket, &image, ",queues=2");
    let vbmq = Vbmq::serve(&[disk], dir.join("vbmq.log"));
    let run = Vm::new(2).disk(&socket, 2).run(&script(
        "cat /sys/block/vda/queue/physical_block_size
         for engine in libaio io_uring; do fio_verify /dev/vda $engine 4 8; done",
    ));
    run.assert_success();
    let mut passed = tagged(&run.output, "FIO-OK");
    passed.sort_unstable();
    assert_eq!(
        passed,
        ["/dev/vda io_uring", "/dev/vda libaio"],
        "{}",
        run.output
    );
    assert!(
        run.output.lines().any(|l| l.trim() == "4096"),
        "the guest sees the 4096-byte physical block:\n{}",
        run.output
    );
    vbmq.stop();
}
