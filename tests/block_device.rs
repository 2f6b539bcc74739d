//! A block device behind vbmq: a loop device over a file (root only, as in CI).

mod common;

use std::process::Command;

use common::disk_spec;
use common::loop_device::{FourKn, Loop};
use common::{Client, Daemon, pattern};

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root for loop devices (scripts/test.sh)"
)]
fn loop_device_reads_writes_discards_and_zeroes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backing.raw");
    std::fs::write(&file, pattern(7, 16 << 20)).unwrap();
    let device = Loop::attach(&file);
    let socket = dir.path().join("blk.sock");
    // As NVMe would be served: the guest's memory registered with the rings, submissions
    // polled by a kernel thread.
    for ring in ["", ",fixed-buffers=on,sqpoll=0"] {
        let daemon = Daemon::start(&[format!(
            "socket={},path={},queues=2{ring}",
            socket.display(),
            device.0
        )]);
        let mut client = Client::connect(&socket, 2, false).unwrap();
        assert_eq!(client.capacity(), 16 << 20);
        let (ret, data) = client.read(1, 8 << 20, 8192);
        assert_eq!(ret, 0, "{ring}");
        assert_eq!(
            data,
            pattern(7, 16 << 20)[8 << 20..(8 << 20) + 8192],
            "{ring}"
        );
        let new = pattern(70, 65536);
        assert_eq!(client.write(0, 1 << 20, &new), 0, "{ring}");
        assert_eq!(client.read(1, 1 << 20, 65536), (0, new), "{ring}");
        assert_eq!(client.write_zeroes(0, 2 << 20, 1 << 20, false), 0, "{ring}");
        let (ret, zeros) = client.read(1, 2 << 20, 1 << 20);
        assert_eq!(ret, 0, "{ring}");
        assert!(
            zeros.iter().all(|b| *b == 0),
            "{ring}: write-zeroes did not zero"
        );
        // A loop device accepts discards (it punches the backing file).
        assert_eq!(client.discard(0, 4 << 20, 1 << 20), 0, "{ring}");
        assert_eq!(client.flush(1), 0, "{ring}");
        drop(client);
        assert!(daemon.terminate().success(), "{ring}");
    }
}

/// An ext2 file system (no `fallocate` at all: no punch-hole, no zero-range) on a loop device,
/// mounted for the test and unmounted on drop.
struct Ext2(tempfile::TempDir);

impl Ext2 {
    fn mount(dir: &std::path::Path) -> Ext2 {
        let image = dir.join("ext2.img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let ok = |c: &mut Command| c.status().map(|s| s.success()).unwrap_or(false);
        assert!(
            ok(Command::new("mkfs.ext2").args(["-q", "-F"]).arg(&image)),
            "mkfs.ext2 (e2fsprogs)"
        );
        let mnt = tempfile::tempdir().unwrap();
        assert!(
            ok(Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(mnt.path())),
            "mount"
        );
        Ext2(mnt)
    }
}

impl Drop for Ext2 {
    fn drop(&mut self) {
        common::loop_device::unmount(self.0.path());
    }
}

/// Storage without discard or zeroing, as a block device (a loop device over a file on ext2,
/// which gets no discard) and as a plain file on ext2: a discard is advisory and succeeds, and
/// write-zeroes, with or without UNMAP, zeroes the range.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root for loop devices (scripts/test.sh)"
)]
fn storage_without_discard_still_discards_and_zeroes() {
    let dir = tempfile::tempdir().unwrap();
    let ext2 = Ext2::mount(dir.path());
    let file = ext2.0.path().join("backing.raw");
    std::fs::write(&file, pattern(9, 16 << 20)).unwrap();
    let device = Loop::attach(&file);
    for path in [device.0.clone(), file.display().to_string()] {
        let socket = dir.path().join("blk.sock");
        let daemon = Daemon::start(&[format!("socket={},path={path}", socket.display())]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        assert_eq!(client.discard(0, 4 << 20, 1 << 20), 0, "{path}: discard");
        for (offset, unmap) in [(2 << 20, false), (6 << 20, true)] {
            let ret = client.write_zeroes(0, offset, 1 << 20, unmap);
            assert_eq!(ret, 0, "{path}: write-zeroes, unmap {unmap}");
            let (ret, zeros) = client.read(0, offset, 1 << 20);
            assert_eq!(ret, 0);
            assert!(
                zeros.iter().all(|b| *b == 0),
                "{path}: unmap {unmap}: not zeroed"
            );
        }
        drop(client);
        assert!(daemon.terminate().success());
    }
    drop(device);
}

/// An image on a file system whose device has 4096-byte sectors, served with O_DIRECT (the
/// default): 512-byte requests at any sector must work (the kernel refuses them with O_DIRECT,
/// so they go through the page cache), and the guest is told the 4096-byte physical block.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root for loop devices and mount (scripts/test.sh)"
)]
fn image_on_a_4096_byte_sector_file_system_serves_512_byte_requests() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FourKn::new(&dir.path().join("4kn.raw"));
    let image = fs.mount.path().join("vm.raw");
    std::fs::write(&image, pattern(11, 4 << 20)).unwrap();
    let socket = dir.path().join("4kn.sock");
    let daemon = Daemon::start(&[disk_spec::with(&socket, &image, ",queues=2")]);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(client.capacity(), 4 << 20);
    // Every 512-byte sector of the first 8 KiB, one request each.
    for sector in 0..16u64 {
        let (ret, data) = client.read((sector % 2) as usize, sector * 512, 512);
        assert_eq!(ret, 0, "read of sector {sector}");
        let at = (sector * 512) as usize;
        assert_eq!(data, pattern(11, 4 << 20)[at..at + 512], "sector {sector}");
    }
    let new = pattern(12, 1536);
    assert_eq!(
        client.write(0, 512 * 3, &new),
        0,
        "an unaligned 1536-byte write"
    );
    assert_eq!(client.read(1, 512 * 3, 1536), (0, new.clone()));
    // Aligned 4 KiB requests keep to O_DIRECT, and see what the buffered write left.
    let (ret, page) = client.read(0, 0, 4096);
    assert_eq!(ret, 0);
    assert_eq!(page[1536..3072], new[..]);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let on_disk = std::fs::read(&image).unwrap();
    assert_eq!(on_disk[1536..3072], new[..]);
}
