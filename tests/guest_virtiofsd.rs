//! A Linux guest on a share served by `vbmq virtiofsd` with the options the stacks pass: the
//! guest kernel takes the submounts vbmq announces (a host mount point inside the share is a
//! mount of its own in the guest, with its own device number). (The POSIX ACL flag's INIT
//! answer is checked in tests/virtiofsd.rs: a virtiofs mount does not show it.)

mod guest;

use guest::{TestDir, Vm, script, tagged};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `vbmq virtiofsd` on `socket` over `shared`, once it printed its readiness line.
struct Virtiofsd(Child, std::path::PathBuf);

impl Virtiofsd {
    fn start(socket: &Path, shared: &Path, args: &[&str], log: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
            .arg("virtiofsd")
            .arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", shared.display()))
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut daemon = Virtiofsd(child, log.to_path_buf());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !daemon
            .log()
            .contains("Waiting for vhost-user socket connection...")
        {
            assert!(daemon.0.try_wait().unwrap().is_none(), "{}", daemon.log());
            assert!(Instant::now() < deadline, "{}", daemon.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.1).unwrap_or_default()
    }
}

impl Drop for Virtiofsd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Unmounts on drop.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh), root"
)]
fn the_guest_kernel_mounts_announced_submounts_apart() {
    let dir = TestDir::new("vfsd-guest");
    let shared = dir.join("shared");
    std::fs::create_dir_all(shared.join("sub")).unwrap();
    let status = Command::new("mount")
        .args(["-t", "tmpfs", "vbmq-sub"])
        .arg(shared.join("sub"))
        .status()
        .unwrap();
    assert!(status.success(), "mount a tmpfs (root)");
    let _mounted = Mounted(shared.join("sub"));
    std::fs::write(shared.join("sub/inner"), "on the submount\n").unwrap();
    let socket = dir.join("fs.sock");
    let daemon = Virtiofsd::start(
        &socket,
        &shared,
        &["--posix-acl", "--announce-submounts", "--cache=auto"],
        &dir.join("vbmq.log"),
    );
    let run = Vm::new(1).share(&socket, "share", 1).run(&script(
        "mount -t virtiofs share /mnt
         # The submount is mounted when first reached.
         echo \"DEVS $(stat -c %d /mnt) $(stat -c %d /mnt/sub/.)\"
         cat /mnt/sub/inner
         grep ' /mnt' /proc/mounts | sed 's/^/MOUNT /'
         echo data >/mnt/file
         umount /mnt/sub 2>/dev/null || true
         umount /mnt",
    ));
    let context = format!("{}\n--- vbmq ---\n{}", run.console, daemon.log());
    run.assert_success();
    let mounts = tagged(&run.output, "MOUNT");
    assert!(
        mounts.iter().any(|m| m.contains(" /mnt virtiofs ")),
        "{context}"
    );
    assert!(
        mounts.iter().any(|m| m.contains(" /mnt/sub virtiofs ")),
        "no submount: {context}"
    );
    let devs: Vec<&str> = tagged(&run.output, "DEVS")
        .first()
        .map(|d| d.split(' ').collect())
        .unwrap_or_default();
    assert_eq!(devs.len(), 2, "{context}");
    assert_ne!(devs[0], devs[1], "{context}");
    assert!(run.output.contains("on the submount"), "{context}");
    assert_eq!(
        std::fs::read_to_string(shared.join("file")).unwrap(),
        "data\n"
    );
}
