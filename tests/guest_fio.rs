//! fio's crc32c verification from a Linux guest, with libaio and io_uring, in every wait mode.

mod guest;

use guest::{TestDir, Vbmq, Vm, script, tagged};

/// One guest, three disks of one vbmq process: `mode=event`, `mode=poll` and `mode=adaptive`.
/// On each, several fio jobs write random blocks to their own regions at once and then verify
/// every block, first through libaio and then through io_uring. The poll disk has one queue:
/// its thread spins on a core of its own, and CI hosts may have only two.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn fio_verify_passes_in_every_mode() {
    let dir = TestDir::new("fio");
    let modes = [
        ("event", 2, ""),
        ("poll", 1, ",cpus=1"),
        ("adaptive", 2, ""),
    ];
    let mut disks = Vec::new();
    let mut vm = Vm::new(2);
    for (mode, queues, extra) in modes {
        let socket = dir.join(&format!("{mode}.sock"));
        let image = dir.disk(&format!("{mode}.img"), 64);
        disks.push(format!(
            "socket={},path={},queues={queues},mode={mode}{extra}",
            socket.display(),
            image.display()
        ));
        vm = vm.disk(&socket, queues);
    }
    let vbmq = Vbmq::serve(&disks, dir.join("vbmq.log"));

    let run = vm.run(&script(
        "for d in vda vdb vdc; do
             for engine in libaio io_uring; do
                 fio_verify /dev/$d $engine 4 12
             done
         done",
    ));
    run.assert_success();
    let mut passed = tagged(&run.output, "FIO-OK");
    passed.sort_unstable();
    let mut expected = Vec::new();
    for disk in ["vda", "vdb", "vdc"] {
        for engine in ["io_uring", "libaio"] {
            expected.push(format!("/dev/{disk} {engine}"));
        }
    }
    assert_eq!(passed, expected, "{modes:?} on vda..vdc:\n{}", run.output);
    vbmq.stop();
}
