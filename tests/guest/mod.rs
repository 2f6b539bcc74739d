//! Boots throwaway Linux guests under QEMU with their disks served by `vbmq serve` over
//! vhost-user-blk, runs a shell script inside and returns what it printed and its exit status.
//!
//! The guest is a Debian kernel and an initramfs packed by `scripts/guest/build-initramfs.sh`;
//! both come from `scripts/deps/guest.sh`. The test script travels as a second cpio archive
//! appended to the initramfs, so the guest needs no other device than the disks under test.
//! Before Linux, SeaBIOS drives every disk too (it probes them for booting), so each boot also
//! checks a second virtio driver and the device reset between the two.
//!
//! Nested KVM hangs in early boot on some hosts, so the accelerator is TCG unless a short probe
//! boot shows KVM works (`VBMQ_GUEST_ACCEL=tcg|kvm|auto`, default `auto`).

#![allow(dead_code)] // Each tests/guest_*.rs uses a different part of the harness.

mod cpio;
mod daemon;
mod qemu;
mod qmp;
mod scripts;
#[allow(clippy::duplicate_mod)] // Tests that take `common` load it a second time.
#[path = "../common/tool.rs"]
pub mod tool;

#[allow(unused_imports)] // guest_libvirt: libvirt starts vbmq, the test does not.
pub use daemon::Vbmq;
#[allow(unused_imports)] // GuestRun: only tests that inspect a failed run name it.
pub use qemu::{GuestRun, RunningVm, Vm, kernel, print_log, result_of};
#[allow(unused_imports)] // Only the migration test drives QEMU through QMP.
pub use qmp::Qmp;
pub use scripts::script;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The hint every missing-prerequisite failure carries: these tests must fail, not skip.
pub const INSTALL_HINT: &str = "install the guest test prerequisites with scripts/deps/guest.sh";

/// The restart tests' delay layer: held completions, long enough that a kill always finds some,
/// short enough for TCG.
pub const RESTART_DELAY: &str = "delay-us=300000,delay-every=8";
/// The restart tests' fio job, run in the guest under the kills and on the host afterwards to
/// check the image.
pub const RESTART_JOB: &str = "--name=restart --ioengine=libaio --iodepth=16 --direct=1 \
    --rw=randwrite --bs=4k --size=12M --numjobs=2 --offset_increment=12M --verify=crc32c \
    --verify_fatal=1 --verify_state_save=0 --group_reporting --rate_iops=150";

/// Checks on the host that `image` holds every block [`RESTART_JOB`] wrote in a guest (and was
/// told was written): fio replays the same job, reading and verifying only.
pub fn assert_image_holds_the_restart_job(image: &Path) {
    let out = std::process::Command::new("fio")
        .arg(format!("--filename={}", image.display()))
        .args(RESTART_JOB.split_whitespace())
        .arg("--verify_only")
        .output()
        .expect("fio on the host (scripts/deps/guest.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("err= 0"),
        "the image lost acknowledged writes:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `--disk` spec serving `image` on `socket`, with `extra` (",queues=2", …) appended.
pub fn disk_spec(socket: &Path, image: &Path, extra: &str) -> String {
    format!(
        "socket={},path={}{extra}",
        socket.display(),
        image.display()
    )
}

/// A scratch directory under /tmp (short paths: Unix socket paths are limited to 108 bytes),
/// removed on drop.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "vbmq-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TestDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Creates a sparse disk image of `mib` MiB and returns its path.
    pub fn disk(&self, name: &str, mib: u64) -> PathBuf {
        let path = self.join(name);
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(mib << 20).unwrap();
        path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Lines of `output` that start with `prefix`, with the prefix and surrounding blanks removed.
pub fn tagged<'a>(output: &'a str, prefix: &str) -> Vec<&'a str> {
    output
        .lines()
        .filter_map(|line| line.trim().strip_prefix(prefix))
        .map(str::trim)
        .collect()
}

/// The single line of `output` tagged `prefix`; panics (with the output) if there is not exactly one.
pub fn tagged_one<'a>(output: &'a str, prefix: &str) -> &'a str {
    match tagged(output, prefix).as_slice() {
        [one] => one,
        other => panic!("expected one {prefix:?} line, got {other:?}; guest output:\n{output}"),
    }
}

/// The guest's consoles as text, carriage returns dropped (missing ones empty).
pub fn read_consoles(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .map(|c| {
            std::fs::read_to_string(c)
                .unwrap_or_default()
                .replace('\r', "")
        })
        .collect()
}

/// The guest program `tests/guest/NAME.c`, built static with `flags` for the initramfs.
pub fn build_c(dir: &TestDir, name: &str, flags: &[&str]) -> Vec<u8> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/guest/{name}.c"));
    let out = dir.join(name);
    tool::run_command(
        std::process::Command::new("cc")
            .args(["-O2", "-static"])
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg(&source),
    );
    std::fs::read(&out).unwrap()
}

/// `content/golden.txt` (the numbers 1 to 20000, a line each) in a `mib`-MiB ext4 image `name`
/// made on the host: returns the image and the file's path.
pub fn golden_ext4(dir: &TestDir, name: &str, mib: u64) -> (PathBuf, PathBuf) {
    let content = dir.join("content");
    std::fs::create_dir_all(&content).unwrap();
    let text: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    let golden = content.join("golden.txt");
    std::fs::write(&golden, &text).unwrap();
    let image = dir.disk(name, mib);
    tool::run_command(
        std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&content)
            .arg(&image),
    );
    (image, golden)
}

/// The guest script that writes on a golden image (see [`golden_ext4`]): reads golden.txt (a
/// `GOLDEN` line), writes four files of its own, runs `after_writes`, appends to golden.txt,
/// leaves the sums of them all in /sums and /mnt/sums (`SUM` lines), trims and checks the file
/// system.
pub fn write_on_golden(after_writes: &str) -> String {
    script(&format!(
        "e2fsck -fn /dev/vda
         mount /dev/vda /mnt
         sha256sum /mnt/golden.txt | sed 's/^/GOLDEN /'
         mkdir /mnt/own
         for i in 1 2 3 4; do
             dd if=/dev/urandom of=/mnt/own/file$i bs=64k count=$((i * 8)) 2>/dev/null
         done
         {after_writes}
         echo appended >>/mnt/golden.txt
         (cd /mnt && sha256sum golden.txt own/* >/sums)
         cp /sums /mnt/sums
         sync
         fstrim -v /mnt
         umount /mnt
         e2fsck -fn /dev/vda
         sed 's/^/SUM /' /sums"
    ))
}

/// A second VM on `socket`'s disk: checks the file system and every file against the `sums`
/// an earlier VM left at its root, and prints them as `SUM` lines. Panics if it fails.
pub fn reread_sums(socket: &Path) -> GuestRun {
    let run = Vm::new(2).disk(socket, 2).run(&script(
        "e2fsck -fn /dev/vda
         mount -o ro /dev/vda /mnt
         (cd /mnt && sha256sum -c sums && sed 's/^/SUM /' sums)
         umount /mnt",
    ));
    run.assert_success();
    run
}

/// Waits until the guest's console (`Vm::console`) shows `marker`; panics after `timeout`.
pub fn wait_for_console(console: &Path, marker: &str, timeout: std::time::Duration) {
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(console).is_ok_and(|text| text.contains(marker)) {
        assert!(
            start.elapsed() < timeout,
            "the guest never printed {marker}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
