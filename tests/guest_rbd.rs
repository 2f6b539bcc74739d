//! A Linux guest on an RBD disk: the disk has the image's size and what fio writes across the
//! guest's hardware queues reads back verified.

mod ceph;
mod guest;

use guest::{TestDir, Vbmq, Vm, script, tagged_one};

#[test]
#[cfg_attr(
    not(all(feature = "guest-tests", feature = "ceph-tests")),
    ignore = "needs features guest-tests and ceph-tests: QEMU 10, a guest kernel and Ceph (scripts/test.sh)"
)]
fn guest_verifies_data_on_an_rbd_disk() {
    let cluster = ceph::Cluster::start();
    cluster.create_image("guest", 64 << 20);
    let dir = TestDir::new("rbd");
    let socket = dir.join("rbd.sock");
    let vbmq = Vbmq::serve(
        &[format!(
            "socket={},{},queues=2",
            socket.display(),
            cluster.disk("guest")
        )],
        dir.join("vbmq.log"),
    );
    let body = script(
        "echo \"SIZE $(($(cat /sys/block/vda/size) * 512))\"
         fio_verify /dev/vda io_uring $(nproc) 8",
    );
    let run = Vm::new(2).disk(&socket, 2).run(&body);
    run.assert_success();
    assert_eq!(tagged_one(&run.output, "SIZE"), (64u64 << 20).to_string());
    tagged_one(&run.output, "FIO-OK /dev/vda");
    vbmq.stop();
}
