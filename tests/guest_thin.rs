//! A guest on a `base=` disk: it reads the base image's file system, writes its own files on
//! top, and a second VM finds both; the base's bytes never change. The same over a base that is
//! an NBD export (`base=nbd+unix`, qemu-nbd serving the golden image).

mod common;
mod guest;
#[path = "common/nbd_servers.rs"]
mod nbd_servers;

use common::sha256;
use guest::{TestDir, Vbmq, Vm, disk_spec, golden_ext4, reread_sums, tagged, write_on_golden};
use nbd_servers::NbdServer;
use std::os::unix::fs::MetadataExt;

const BASE_MIB: u64 = 128;

/// The base is an ext4 image made on the host with a file in it. The first VM checks the file
/// system and the file, writes files of its own, syncs and checks again; a second VM on the same
/// DISK finds every file. The base's bytes are the same afterwards, and DISK holds only what was
/// written.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_writes_on_a_disk_made_from_a_base_image() {
    let dir = TestDir::new("thin");
    let (base, golden) = golden_ext4(&dir, "golden.img", BASE_MIB);
    let base_sum = sha256(&base);
    let golden_sum = sha256(&golden);
    let disk = dir.join("vm.raw");
    let socket = dir.join("thin.sock");
    let vbmq = Vbmq::serve(
        &[disk_spec(
            &socket,
            &disk,
            &format!(",base={},queues=2", base.display()),
        )],
        dir.join("vbmq.log"),
    );
    let first = Vm::new(2).disk(&socket, 2).run(&write_on_golden(""));
    first.assert_success();
    let second = reread_sums(&socket);
    vbmq.stop();
    let golden = tagged(&first.output, "GOLDEN");
    assert_eq!(golden.len(), 1, "{}", first.output);
    assert!(golden[0].starts_with(&golden_sum), "{}", first.output);
    let sums = tagged(&first.output, "SUM");
    assert_eq!(sums.len(), 5, "{}", first.output);
    assert_eq!(sums, tagged(&second.output, "SUM"));
    assert_eq!(sha256(&base), base_sum, "the base changed");
    let allocated = std::fs::metadata(&disk).unwrap().blocks() * 512;
    assert!(
        allocated < (BASE_MIB << 20) / 2,
        "DISK has {allocated} bytes allocated"
    );
}

/// As above, the base read from qemu-nbd's export of the golden image (`base=nbd+unix`): the
/// guest reads the remote file system, its writes land in DISK, the remote image is unchanged.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_writes_on_a_disk_whose_base_is_an_nbd_export() {
    let dir = TestDir::new("thin-nbd");
    let (base, golden) = golden_ext4(&dir, "golden.img", BASE_MIB);
    let base_sum = sha256(&base);
    let golden_sum = sha256(&golden);
    let export = dir.join("golden.nbd");
    let server = NbdServer::qemu_nbd(&base, &export, "golden", true);
    let disk = dir.join("vm.raw");
    let socket = dir.join("thin.sock");
    let vbmq = Vbmq::serve(
        &[disk_spec(
            &socket,
            &disk,
            &format!(
                ",base=nbd+unix:///golden?socket={},queues=2",
                export.display()
            ),
        )],
        dir.join("vbmq.log"),
    );
    let first = Vm::new(2).disk(&socket, 2).run(&write_on_golden(""));
    first.assert_success();
    let second = reread_sums(&socket);
    vbmq.stop();
    server.kill();
    let golden = tagged(&first.output, "GOLDEN");
    assert_eq!(golden.len(), 1, "{}", first.output);
    assert!(golden[0].starts_with(&golden_sum), "{}", first.output);
    let sums = tagged(&first.output, "SUM");
    assert_eq!(sums.len(), 5, "{}", first.output);
    assert_eq!(sums, tagged(&second.output, "SUM"));
    assert_eq!(sha256(&base), base_sum, "the remote image changed");
}
