//! Online resize seen by a running Linux guest: `vbmq ctl resize` grows the disk, vbmq sends
//! the configuration change notice, QEMU raises the configuration interrupt, and the guest's
//! `/sys/block/vda/size` follows; the guest then writes and verifies the new tail.

mod common;
mod guest;

use std::time::Duration;

use common::ctl::ok;
use common::{ctl, s};
use guest::{TestDir, Vbmq, Vm, disk_spec, script, tagged, wait_for_console};

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_running_guest_sees_the_disk_grow_and_uses_the_tail() {
    let dir = TestDir::new("resize");
    let socket = dir.join("disk.sock");
    let control = dir.join("ctl.sock");
    let image = dir.disk("disk.img", 64);
    let spec = disk_spec(&socket, &image, ",queues=2");
    let vbmq = Vbmq::serve_controlled(&control, &[spec], dir.join("vbmq.log"));
    let console = dir.join("console.log");
    let mut vm = Vm::new(2).disk(&socket, 2);
    vm.console = Some(console.clone());
    let resizer = std::thread::spawn(move || {
        wait_for_console(&console, "RESIZE-NOW", Duration::from_secs(120));
        ok(&ctl(&control, &["resize", s(&socket), "96M"]));
    });
    let run = vm.run(&script(
        "echo \"SIZE-BEFORE $(cat /sys/block/vda/size)\"
         echo RESIZE-NOW
         i=0
         while [ \"$(cat /sys/block/vda/size)\" = 131072 ] && [ $i -lt 600 ]; do
             sleep 0.1; i=$((i + 1))
         done
         echo \"SIZE-AFTER $(cat /sys/block/vda/size)\"
         dmesg | grep -i 'capacity change' | sed 's/^/DMESG /' || true
         quiet fio --name=tail --filename=/dev/vda --offset=64M --size=32M --rw=write \\
             --bs=64k --direct=1 --ioengine=libaio --iodepth=8 --verify=crc32c \\
             --verify_fatal=1 --verify_state_save=0
         echo TAIL-OK",
    ));
    resizer.join().expect("the resize");
    run.assert_success();
    assert_eq!(
        tagged(&run.output, "SIZE-BEFORE"),
        vec!["131072"],
        "{}",
        run.console
    );
    assert_eq!(
        tagged(&run.output, "SIZE-AFTER"),
        vec!["196608"],
        "{}",
        run.console
    );
    assert_eq!(tagged(&run.output, "TAIL-OK").len(), 1, "{}", run.output);
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 96 << 20);
    vbmq.stop();
}
