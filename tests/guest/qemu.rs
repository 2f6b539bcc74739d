//! Runs one guest: QEMU with vhost-user-blk-pci disks, the test kernel and initramfs.

use super::{INSTALL_HINT, TestDir, cpio};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const QEMU: &str = "qemu-system-x86_64";
const BEGIN_MARKER: &str = "VBMQ-GUEST-BEGIN";
const EXIT_MARKER: &str = "VBMQ-GUEST-EXIT ";
/// A KVM boot of the probe guest takes about a second; a hung nested KVM never finishes.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// The machine one test script runs in.
pub struct Vm {
    pub vcpus: u32,
    pub mem_mib: u32,
    /// vhost-user-blk sockets with the `num-queues` QEMU gives each disk; `/dev/vda` is the first.
    pub disks: Vec<(PathBuf, u32)>,
    /// vhost-user-fs sockets with their tags (`mount -t virtiofs TAG`) and request queues.
    pub shares: Vec<(PathBuf, String, u32)>,
    /// The guest is killed and the test fails after this long.
    pub timeout: Duration,
    /// QEMU reconnects to a disk's socket this long after its backend went away.
    pub reconnect_ms: Option<u32>,
    /// Where the serial console is written as the guest runs (a scratch file if `None`).
    pub console: Option<PathBuf>,
    /// Added to the kernel command line.
    pub kernel_args: String,
}

/// A guest started by [`Vm::start`], killed on drop (its exit status printed first if the test
/// panics: its logs are the caller's, see [`print_log`]).
pub struct RunningVm {
    child: KillOnDrop,
    /// Its serial console.
    pub console: PathBuf,
    /// What QEMU prints on stderr.
    pub stderr_file: PathBuf,
}

/// What a guest printed and how its script ended; a test that panics while it holds one prints
/// the console and QEMU's stderr.
pub struct GuestRun {
    /// Everything on the serial console (kernel messages included).
    pub console: String,
    /// What the script printed.
    pub output: String,
    /// The script's exit status.
    pub status: i32,
    pub elapsed: Duration,
    /// What QEMU printed on stderr (`None`: the caller prints the logs).
    qemu_stderr: Option<String>,
}

impl Drop for GuestRun {
    fn drop(&mut self) {
        if let Some(stderr) = &self.qemu_stderr
            && std::thread::panicking()
        {
            print_log("guest console", &self.console);
            print_log("QEMU stderr", stderr);
        }
    }
}

/// Prints one captured log to stderr, framed with `title` (the test's output shows it on failure).
pub fn print_log(title: &str, text: &str) {
    eprintln!(
        "--- {title} ---\n{}\n--- end of {title} ---",
        text.trim_end()
    );
}

impl GuestRun {
    /// Panics with the console unless the script exited 0.
    pub fn assert_success(&self) -> &Self {
        assert_eq!(
            self.status, 0,
            "guest script failed; console:\n{}",
            self.console
        );
        self
    }

    /// Panics with the console if the guest's kernel logged I/O errors (`DMESG-ERRORS`).
    pub fn assert_no_io_errors(&self) -> &Self {
        assert!(
            super::tagged(&self.output, "DMESG-ERRORS").is_empty(),
            "the guest logged I/O errors:\n{}",
            self.console
        );
        self
    }

    /// The script succeeded, its fio job too (`FIO-OK` once), and the kernel logged no I/O
    /// errors.
    pub fn assert_fio_ok(&self) -> &Self {
        self.assert_success();
        assert_eq!(
            super::tagged(&self.output, "FIO-OK").len(),
            1,
            "fio failed:\n{}",
            self.console
        );
        self.assert_no_io_errors()
    }
}

impl Vm {
    pub fn new(vcpus: u32) -> Self {
        Vm {
            vcpus,
            mem_mib: 512,
            disks: Vec::new(),
            shares: Vec::new(),
            timeout: Duration::from_secs(150),
            reconnect_ms: None,
            console: None,
            kernel_args: String::new(),
        }
    }

    pub fn disk(mut self, socket: &Path, num_queues: u32) -> Self {
        self.disks.push((socket.to_path_buf(), num_queues));
        self
    }

    pub fn share(mut self, socket: &Path, tag: &str, num_queues: u32) -> Self {
        self.shares
            .push((socket.to_path_buf(), tag.to_string(), num_queues));
        self
    }

    /// Boots the guest, runs `script` with `sh` as its only job and returns once it powered off.
    /// Panics if the guest times out or never reports the script's status.
    pub fn run(&self, script: &str) -> GuestRun {
        let accel = accelerator();
        match self.try_run(script) {
            Ok(run) => {
                eprintln!(
                    "guest ({accel}, {} vCPUs) ran in {:.1}s",
                    self.vcpus,
                    run.elapsed.as_secs_f64()
                );
                run
            }
            Err(why) => panic!("guest ({accel}) failed: {why}"),
        }
    }

    /// As [`Self::run`], but a guest that times out or reports no status is an `Err` with the
    /// console, for tests that expect the guest to hang.
    pub fn try_run(&self, script: &str) -> Result<GuestRun, String> {
        // Two cores are shared by every guest and daemon: one guest at a time keeps TCG timing sane.
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        self.boot(accelerator(), script)
    }

    /// Writes the initramfs that runs `script`, with executables `programs` (name, contents)
    /// beside it at the root, to `path` (for [`Self::start`]).
    pub fn initramfs(script: &str, programs: &[(&str, &[u8])], path: &Path) {
        let mut image = std::fs::read(base_initramfs()).unwrap();
        let mut files = vec![("test.sh", 0o755, script.as_bytes())];
        files.extend(programs.iter().map(|&(name, bytes)| (name, 0o755, bytes)));
        image.extend(cpio::archive(&files));
        std::fs::write(path, image).unwrap();
    }

    /// Starts QEMU with `initrd` (from [`Self::initramfs`]) and `extra` arguments (`-incoming`,
    /// `-qmp`), the console going to `console`, and returns at once.
    pub fn start(&self, initrd: &Path, console: &Path, extra: &[String]) -> RunningVm {
        let stderr = console.with_extension("qemu.log");
        let mut cmd = self.command(accelerator(), initrd, console);
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {QEMU}: {e}; {INSTALL_HINT}"));
        RunningVm {
            child: KillOnDrop(child),
            console: console.to_path_buf(),
            stderr_file: stderr,
        }
    }

    fn boot(&self, accel: &str, script: &str) -> Result<GuestRun, String> {
        let dir = TestDir::new("guest");
        let initrd = dir.join("initrd");
        let mut image = std::fs::read(base_initramfs()).map_err(|e| e.to_string())?;
        image.extend(cpio::archive(&[("test.sh", 0o755, script.as_bytes())]));
        std::fs::write(&initrd, image).map_err(|e| e.to_string())?;
        let serial = self
            .console
            .clone()
            .unwrap_or_else(|| dir.join("serial.log"));
        let stderr = dir.join("qemu.log");

        let mut cmd = self.command(accel, &initrd, &serial);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).map_err(|e| e.to_string())?);
        let start = Instant::now();
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{QEMU} not found; {INSTALL_HINT}"),
            _ => format!("cannot start {QEMU}: {e}"),
        })?;
        let exit = wait_for(KillOnDrop(child), self.timeout)?;
        let elapsed = start.elapsed();

        let console =
            String::from_utf8_lossy(&std::fs::read(&serial).unwrap_or_default()).replace('\r', "");
        let qemu_log = std::fs::read_to_string(&stderr).unwrap_or_default();
        let context = format!("\n--- console ---\n{console}\n--- qemu stderr ---\n{qemu_log}");
        let Some(exit) = exit else {
            return Err(format!("timed out after {:?}{context}", self.timeout));
        };
        let Some((status, output)) = script_result(&console) else {
            return Err(format!(
                "no exit status from the guest (qemu {exit}){context}"
            ));
        };
        Ok(GuestRun {
            output: output.to_string(),
            console,
            status,
            elapsed,
            qemu_stderr: Some(qemu_log),
        })
    }

    fn command(&self, accel: &str, initrd: &Path, serial: &Path) -> Command {
        let mem = format!("{}M", self.mem_mib);
        let mut cmd = Command::new(QEMU);
        cmd.args(["-nodefaults", "-nographic", "-no-reboot"])
            .args(accel_args(accel))
            .args(["-smp", &self.vcpus.to_string(), "-m", &mem])
            // vhost-user needs guest RAM the backend can map: a shared memfd as the NUMA node.
            .args([
                "-object",
                &format!("memory-backend-memfd,id=mem,size={mem},share=on"),
            ])
            .args(["-numa", "node,memdev=mem"])
            .arg("-kernel")
            .arg(kernel())
            .arg("-initrd")
            .arg(initrd)
            .args([
                "-append",
                &format!("console=ttyS0 quiet panic=-1 {}", self.kernel_args),
            ])
            .arg("-serial")
            .arg(format!("file:{}", serial.display()));
        for (i, (socket, queues)) in self.disks.iter().enumerate() {
            cmd.args([
                "-chardev",
                &format!(
                    "socket,id=disk{i},path={}{}",
                    socket.display(),
                    self.reconnect_ms
                        .map(|ms| format!(",reconnect-ms={ms}"))
                        .unwrap_or_default()
                ),
                "-device",
                &format!("vhost-user-blk-pci,chardev=disk{i},num-queues={queues}"),
            ]);
        }
        for (i, (socket, tag, queues)) in self.shares.iter().enumerate() {
            cmd.args([
                "-chardev",
                &format!("socket,id=fs{i},path={}", socket.display()),
                "-device",
                &format!(
                    "vhost-user-fs-pci,chardev=fs{i},tag={tag},num-request-queues={queues},\
                     queue-size=1024"
                ),
            ]);
        }
        cmd
    }
}

impl RunningVm {
    /// Waits for QEMU to exit (the guest powered off), up to `timeout`; true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(_)) = self.child.0.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// What QEMU printed on stderr.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    /// The console so far.
    pub fn console_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()).replace('\r', "")
    }
}

impl Drop for RunningVm {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let status = match self.child.0.try_wait() {
                Ok(Some(status)) => status.to_string(),
                Ok(None) => "running (killed now)".to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!("QEMU of {}: {status}", self.console.display());
        }
    }
}

/// The script's status and output from the consoles of the QEMUs one guest ran in, in order
/// (a guest that migrated printed its start in one and its end in another; the caller prints
/// their logs on failure).
pub fn result_of(consoles: &[String]) -> Option<GuestRun> {
    let console = consoles.concat();
    let (status, output) = script_result(&console)?;
    Some(GuestRun {
        output: output.to_string(),
        console: console.clone(),
        status,
        elapsed: Duration::ZERO,
        qemu_stderr: None,
    })
}

/// The guest's exit, or None if it ran out of time (it is killed then).
fn wait_for(mut child: KillOnDrop, timeout: Duration) -> Result<Option<ExitStatus>, String> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.0.try_wait().map_err(|e| e.to_string())? {
            return Ok(Some(status));
        }
        if start.elapsed() > timeout {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The script's exit status and what it printed, from the console /init wrote them to.
fn script_result(console: &str) -> Option<(i32, &str)> {
    let (_, rest) = console.split_once(BEGIN_MARKER)?;
    let (output, after) = rest.split_once(EXIT_MARKER)?;
    let status = after.lines().next()?.trim().parse().ok()?;
    Some((status, output.trim_start_matches('\n')))
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn accel_args(accel: &str) -> Vec<&'static str> {
    match accel {
        "kvm" => vec!["-accel", "kvm", "-cpu", "host"],
        // `max` gives the guest SSE4.2 and friends (hardware CRC32C for fio's verify).
        _ => vec!["-accel", "tcg", "-cpu", "max"],
    }
}

/// `kvm` or `tcg`: forced by VBMQ_GUEST_ACCEL, else KVM only if a probe guest boots with it.
/// The probe result is kept for the host's boot (keyed by its boot id) in the target directory.
fn accelerator() -> &'static str {
    static ACCEL: OnceLock<&'static str> = OnceLock::new();
    ACCEL.get_or_init(|| {
        match std::env::var("VBMQ_GUEST_ACCEL").as_deref() {
            Ok("kvm") => return "kvm",
            Ok("tcg") => return "tcg",
            Ok("auto") | Err(_) => {}
            Ok(other) => panic!("VBMQ_GUEST_ACCEL={other}: expected kvm, tcg or auto"),
        }
        if !Path::new("/dev/kvm").exists() {
            return "tcg";
        }
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .unwrap_or_default()
            .trim()
            .to_string();
        let record = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("kvm-probe-{boot_id}"));
        if let Ok(known) = std::fs::read_to_string(&record) {
            match known.trim() {
                "kvm" => return "kvm",
                "tcg" => return "tcg",
                _ => {}
            }
        }
        let probe = Vm {
            vcpus: 1,
            mem_mib: 256,
            disks: Vec::new(),
            shares: Vec::new(),
            timeout: KVM_PROBE_TIMEOUT,
            reconnect_ms: None,
            console: None,
            kernel_args: String::new(),
        };
        let (accel, conclusive) = match probe.boot("kvm", "echo probe") {
            Ok(run) if run.status == 0 => ("kvm", true),
            // Without QEMU or the kernel nothing was learnt about KVM: the tests fail anyway.
            Err(why) if why.contains(INSTALL_HINT) => ("tcg", false),
            _ => ("tcg", true),
        };
        eprintln!("KVM probe: using {accel}");
        if conclusive {
            let _ = std::fs::write(&record, accel);
        }
        accel
    })
}

fn guest_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("VBMQ_GUEST_CACHE") {
        return dir.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/vbmq-guest")
}

/// The guest kernel unpacked by scripts/deps/guest.sh.
pub fn kernel() -> &'static Path {
    static KERNEL: OnceLock<PathBuf> = OnceLock::new();
    KERNEL.get_or_init(|| {
        let boot = guest_cache().join("kernel/boot");
        std::fs::read_dir(&boot)
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            })
            .unwrap_or_else(|| panic!("no guest kernel in {}; {INSTALL_HINT}", boot.display()))
    })
}

/// The base initramfs, built once per test process.
fn base_initramfs() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/guest/build-initramfs.sh");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vbmq-guest-initramfs.cpio");
        let result = Command::new(&script)
            .arg(&out)
            .env("VBMQ_GUEST_CACHE", guest_cache())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            result.status.success(),
            "{} failed; {INSTALL_HINT}\n{}",
            script.display(),
            String::from_utf8_lossy(&result.stderr)
        );
        out
    })
}

#[cfg(test)]
mod tests {
    use super::script_result;

    #[test]
    fn script_result_reads_the_markers() {
        let console = "SeaBIOS\nVBMQ-GUEST-BEGIN\nhello\nworld\nVBMQ-GUEST-EXIT 3\n[ 1.0] reboot\n";
        assert_eq!(script_result(console), Some((3, "hello\nworld\n")));
        assert_eq!(script_result("VBMQ-GUEST-BEGIN\nhung"), None);
        assert_eq!(script_result("Kernel panic"), None);
    }
}
