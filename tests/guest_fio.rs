//! fio's crc32c verification from a Linux guest, with libaio and io_uring, in every wait mode.

mod guest;

use guest::{TestDir, Vbmq, Vm, script, tagged};

/// One guest, three disks of one vbmq process: `mode=event`, `mode=poll` and `mode=adaptive`.
/// On each, several fio jobs write random blocks to their own regions at once and then verify
/// every block, first through libaio and then through io_uring.
#[test]
fn fio_verify_passes_in_every_mode() {
    let dir = TestDir::new("fio");
    let modes = ["event", "poll", "adaptive"];
    let sockets: Vec<_> = modes
        .iter()
        .map(|m| dir.join(&format!("{m}.sock")))
        .collect();
    let disks: Vec<String> = modes
        .iter()
        .zip(&sockets)
        .map(|(mode, socket)| {
            let image = dir.disk(&format!("{mode}.img"), 64);
            format!(
                "socket={},path={},queues=2,mode={mode}",
                socket.display(),
                image.display()
            )
        })
        .collect();
    let vbmq = Vbmq::serve(&disks, dir.join("vbmq.log"));

    let mut vm = Vm::new(2);
    for socket in &sockets {
        vm = vm.disk(socket, 2);
    }
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
    assert_eq!(
        passed, expected,
        "modes {modes:?} on vda..vdc:\n{}",
        run.output
    );
    vbmq.stop();
}
