//! Loop devices for the tests that need a block device (root only, as in CI).

use std::process::Command;

use super::tool::run_command;

/// A loop device, detached on drop.
pub struct Loop(pub String);

impl Loop {
    pub fn attach(file: &std::path::Path) -> Loop {
        let out = run_command(
            Command::new("losetup")
                .args(["--find", "--show", "--direct-io=on"])
                .arg(file),
        );
        Loop(out.trim().to_string())
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A file system on a 4096-byte-sector device, mounted for the test; unmounted and detached on
/// drop.
pub struct FourKn {
    pub mount: tempfile::TempDir,
    _device: Loop,
}

impl FourKn {
    pub fn new(backing: &std::path::Path) -> FourKn {
        std::fs::File::create(backing)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let out = run_command(
            Command::new("losetup")
                .args(["--find", "--show", "--sector-size", "4096"])
                .arg(backing),
        );
        let device = Loop(out.trim().to_string());
        let mkfs = Command::new("mkfs.ext4")
            .args(["-q", "-F", &device.0])
            .status()
            .expect("mkfs.ext4 (e2fsprogs)");
        assert!(mkfs.success());
        let mount = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .arg(&device.0)
            .arg(mount.path())
            .status()
            .expect("mount");
        assert!(mounted.success());
        FourKn {
            mount,
            _device: device,
        }
    }
}

impl Drop for FourKn {
    fn drop(&mut self) {
        unmount(self.mount.path());
    }
}

/// Unmounts `dir`, waiting (up to 5 s) for what still holds it: a loop device over a file in it
/// is released by the kernel a little after `losetup -d`, and a daemon just terminated may
/// still be closing its files.
pub fn unmount(dir: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let out = Command::new("umount").arg(dir).output();
        if out.as_ref().is_ok_and(|out| out.status.success()) {
            return;
        }
        if std::time::Instant::now() > deadline {
            let err = out.map(|out| String::from_utf8_lossy(&out.stderr).into_owned());
            panic!("umount {}: {err:?}", dir.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
