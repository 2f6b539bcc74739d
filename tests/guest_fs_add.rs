//! A Linux guest mounts a share added at run time (`vbmq ctl add-fs`) to a vbmq confined as by
//! default, reads the host's file and writes its own there; `remove-fs` then takes the share
//! away and its socket with it.

mod common;
mod guest;

use common::ctl;
use guest::{TestDir, Vbmq, Vm, script};
use std::process::Command;

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_mounts_a_share_added_at_run_time() {
    let dir = TestDir::new("fs-add");
    let roots = dir.join("roots");
    let shared = roots.join("vm1");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("from-host"), "written by the host\n").unwrap();
    let control = dir.join("run/ctl.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("serve")
        .arg("--control")
        .arg(&control)
        .arg("--fs-root")
        .arg(&roots);
    let vbmq = Vbmq::spawn(cmd, vec![control.clone()], dir.join("vbmq.log"));
    let socket = dir.join("sockets/vm1-fs.sock");
    let spec = format!(
        "socket={},dir={},tag=share,queues=2,mode=adaptive",
        socket.display(),
        shared.display()
    );
    let out = ctl(&control, &["add-fs", &spec]);
    assert!(out.status.success(), "add-fs: {out:?}\n{}", vbmq.log_text());

    let run = Vm::new(2).share(&socket, "share", 2).run(&script(
        "mount -t virtiofs share /mnt
         cat /mnt/from-host
         mkdir /mnt/guest
         fio --name=verify --directory=/mnt/guest --size=2M --bs=4k --rw=randwrite \
             --ioengine=psync --verify=crc32c --verify_fatal=1 --do_verify=1 \
             --output-format=terse >/dev/null && echo FIO verified
         echo from the guest >/mnt/from-guest
         umount /mnt",
    ));
    run.assert_success();
    assert!(run.output.contains("written by the host"), "{}", run.output);
    assert!(run.output.contains("FIO verified"), "{}", run.output);
    assert_eq!(
        std::fs::read_to_string(shared.join("from-guest")).unwrap(),
        "from the guest\n"
    );

    let out = ctl(&control, &["remove-fs", socket.to_str().unwrap()]);
    assert!(out.status.success(), "remove-fs: {out:?}");
    assert!(!socket.exists(), "the share's socket left behind");
    vbmq.stop();
}
