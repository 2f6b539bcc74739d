//! A Linux guest sees each vbmq disk with its size, its hardware queues and its read-only flag.

mod guest;

use guest::{TestDir, Vbmq, Vm, disk_spec, script, tagged_one};

/// One vbmq process serves a 1-queue disk (with a `serial=`) and a 4-queue disk to a 2-vCPU guest and then, after that
/// guest powered off, to a 4-vCPU guest. The guest's virtio-blk driver makes one blk-mq hardware
/// queue per virtqueue, but never more than it has CPUs.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn guest_sees_size_and_hardware_queues() {
    let dir = TestDir::new("topology");
    let one = dir.join("one.sock");
    let four = dir.join("four.sock");
    let vbmq = Vbmq::serve(
        &[
            disk_spec(&one, &dir.disk("one.img", 64), ",queues=1,serial=vbmq-one"),
            disk_spec(&four, &dir.disk("four.img", 96), ",queues=4"),
        ],
        dir.join("vbmq.log"),
    );
    let body = script(
        "for d in vda vdb; do
             echo \"SIZE $d $(($(cat /sys/block/$d/size) * 512))\"
             show_queues $d
         done
         echo \"SERIAL $(cat /sys/block/vda/serial)\"
         fio_verify /dev/vdb io_uring $(nproc) 8",
    );
    for (vcpus, vdb_queues) in [(2, 2), (4, 4)] {
        let run = Vm::new(vcpus).disk(&one, 1).disk(&four, 4).run(&body);
        run.assert_success();
        let out = &run.output;
        eprintln!(
            "{vcpus} vCPUs: {}; {}",
            tagged_one(out, "MQ vda"),
            tagged_one(out, "MQ vdb")
        );
        assert_eq!(tagged_one(out, "SIZE vda"), (64u64 << 20).to_string());
        assert_eq!(tagged_one(out, "SIZE vdb"), (96u64 << 20).to_string());
        assert!(tagged_one(out, "MQ vda").starts_with("1:"), "{out}");
        assert!(
            tagged_one(out, "MQ vdb").starts_with(&format!("{vdb_queues}:")),
            "{vcpus} vCPUs, queues=4: {out}"
        );
        assert_eq!(tagged_one(out, "SERIAL"), "vbmq-one");
        tagged_one(out, "FIO-OK /dev/vdb");
    }
    vbmq.stop();
}

/// A `readonly=on` disk is read-only in the guest, a write to it fails, and the image keeps its
/// bytes.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn readonly_disk_refuses_guest_writes() {
    let dir = TestDir::new("readonly");
    let image = dir.join("ro.img");
    let pattern: Vec<u8> = (0..16u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&image, &pattern).unwrap();
    let socket = dir.join("ro.sock");
    let vbmq = Vbmq::serve(
        &[disk_spec(&socket, &image, ",readonly=on")],
        dir.join("vbmq.log"),
    );
    let run = Vm::new(1).disk(&socket, 1).run(&script(
        "echo \"RO $(cat /sys/block/vda/ro)\"
         if dd if=/dev/zero of=/dev/vda bs=4k count=1 oflag=direct conv=notrunc; then
             echo 'WRITE succeeded'
         else
             echo 'WRITE failed'
         fi
         echo \"SUM $(dd if=/dev/vda bs=1M iflag=direct 2>/dev/null | sha256sum)\"",
    ));
    run.assert_success();
    assert_eq!(tagged_one(&run.output, "RO"), "1");
    assert_eq!(tagged_one(&run.output, "WRITE"), "failed");
    vbmq.stop();
    assert!(
        std::fs::read(&image).unwrap() == pattern,
        "the read-only image changed"
    );
    let host_sum = sha256(&image);
    assert!(
        tagged_one(&run.output, "SUM").starts_with(&host_sum),
        "{}",
        run.output
    );
}

fn sha256(path: &std::path::Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}
