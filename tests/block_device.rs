//! A block device behind vbmq: a loop device over a file (root only, as in CI).

mod common;

use std::process::Command;

use common::{Client, Daemon, pattern};

/// A loop device, detached on drop.
struct Loop(String);

impl Loop {
    fn attach(file: &std::path::Path) -> Loop {
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(file)
            .output()
            .expect("losetup (util-linux) is needed, as root");
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

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
    let daemon = Daemon::start(&[format!(
        "socket={},path={},queues=2",
        socket.display(),
        device.0
    )]);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(client.capacity(), 16 << 20);
    let (ret, data) = client.read(1, 8 << 20, 8192);
    assert_eq!(ret, 0);
    assert_eq!(data, pattern(7, 16 << 20)[8 << 20..(8 << 20) + 8192]);
    let new = pattern(70, 65536);
    assert_eq!(client.write(0, 1 << 20, &new), 0);
    assert_eq!(client.read(1, 1 << 20, 65536), (0, new));
    assert_eq!(client.write_zeroes(0, 2 << 20, 1 << 20, false), 0);
    let (ret, zeros) = client.read(1, 2 << 20, 1 << 20);
    assert_eq!(ret, 0);
    assert!(zeros.iter().all(|b| *b == 0), "write-zeroes did not zero");
    // A loop device accepts discards (it punches the backing file).
    assert_eq!(client.discard(0, 4 << 20, 1 << 20), 0);
    assert_eq!(client.flush(1), 0);
    drop(client);
    assert!(daemon.terminate().success());
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
        let _ = Command::new("umount").arg(self.0.path()).status();
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
