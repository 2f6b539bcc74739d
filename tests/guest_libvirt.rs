//! A real libvirt (Debian 12's libvirt 9.0) starts vbmq as a VM's virtio-fs backend: a domain's
//! `<filesystem>` with `<driver type='virtiofs'/>` and `<binary path='.../vbmq'/>` makes libvirt
//! bind the socket, run vbmq with virtiofsd's command line (`--fd=N -o source=DIR,...`) and start
//! QEMU (TCG) on it; the guest mounts the share, reads the host's file and writes one back.
//!
//! The test starts its own libvirtd in a mount namespace of its own: the test directory is bound
//! over /run/libvirt, /var/lib/libvirt, /etc/libvirt (its qemu.conf: QEMU as root, logs to
//! files, no virtlogd), /var/log/libvirt and /var/cache/libvirt, and copies of /etc/passwd and
//! /etc/group with the `libvirt-qemu` user libvirtd looks up are bound over those; nothing of the
//! host's configuration changes and a libvirtd the host runs is not disturbed. It needs root,
//! `unshare` and the packages libvirt-daemon, libvirt-daemon-driver-qemu and libvirt-clients.

mod guest;

use guest::{TestDir, Vm, kernel, result_of, script};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "vbmq-libvirt-test";
const TAG: &str = "share";

/// Binds the test directory's parts over libvirt's directories, then becomes libvirtd.
const START: &str = r#"set -e
T=$1
for d in run:/run/libvirt lib:/var/lib/libvirt etc:/etc/libvirt log:/var/log/libvirt \
         cache:/var/cache/libvirt; do
    mkdir -p "$T/${d%%:*}" "${d#*:}"
    mount --bind "$T/${d%%:*}" "${d#*:}"
done
[ -d "$T/qemu-share" ] && mount --bind "$T/qemu-share" /usr/share/qemu
mount --bind "$T/passwd" /etc/passwd
mount --bind "$T/group" /etc/group
exec libvirtd --pid-file "$T/libvirtd.pid"
"#;

/// A libvirtd of the test's own, stopped (and its domain destroyed) on drop.
struct Libvirtd {
    child: Child,
    dir: PathBuf,
}

impl Libvirtd {
    /// Starts libvirtd; with `descriptor`, QEMU's vhost-user descriptors are `descriptor`
    /// alone (a copy of /usr/share/qemu with it in vhost-user/ is bound over the original).
    fn start(dir: &Path, descriptor: Option<&str>) -> Self {
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        if let Some(json) = descriptor {
            let copy = dir.join("qemu-share");
            let status = Command::new("cp")
                .arg("-a")
                .arg("/usr/share/qemu")
                .arg(&copy)
                .status()
                .unwrap();
            assert!(status.success());
            std::fs::create_dir_all(copy.join("vhost-user")).unwrap();
            std::fs::write(copy.join("vhost-user/40-vbmq-fs.json"), json).unwrap();
        }
        std::fs::write(
            dir.join("etc/qemu.conf"),
            "user = \"root\"\ngroup = \"root\"\nstdio_handler = \"file\"\n",
        )
        .unwrap();
        let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
        let mut group = std::fs::read_to_string("/etc/group").unwrap();
        if !passwd.lines().any(|l| l.starts_with("libvirt-qemu:")) {
            passwd.push_str("libvirt-qemu:x:64055:64055::/var/lib/libvirt:/usr/sbin/nologin\n");
        }
        if !group.lines().any(|l| l.starts_with("libvirt-qemu:")) {
            group.push_str("libvirt-qemu:x:64055:\n");
        }
        std::fs::write(dir.join("passwd"), passwd).unwrap();
        std::fs::write(dir.join("group"), group).unwrap();
        std::fs::write(dir.join("start.sh"), START).unwrap();
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh"])
            .arg(dir.join("start.sh"))
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("libvirtd.log")).unwrap())
            .spawn()
            .expect("unshare (util-linux)");
        let mut libvirtd = Libvirtd {
            child,
            dir: dir.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !libvirtd.virsh(&["uri"]).status.success() {
            assert!(
                libvirtd.child.try_wait().unwrap().is_none(),
                "libvirtd exited: {}",
                libvirtd.log("libvirtd.log")
            );
            assert!(
                Instant::now() < deadline,
                "libvirtd does not answer: {}",
                libvirtd.log("libvirtd.log")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        libvirtd
    }

    fn virsh(&self, args: &[&str]) -> std::process::Output {
        let uri = format!(
            "qemu+unix:///system?socket={}",
            self.dir.join("run/libvirt-sock").display()
        );
        Command::new("virsh")
            .args(["-q", "-c", &uri])
            .args(args)
            .output()
            .expect("virsh (libvirt-clients)")
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Libvirtd {
    fn drop(&mut self) {
        let _ = self.virsh(&["destroy", NAME]);
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on the libvirtd this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The domain; `binary` is `path='...'` for `<binary>`, or empty to let libvirt take the
/// vhost-user descriptor's.
fn domain_xml(dir: &Path, shared: &Path, initrd: &Path, binary: &str) -> String {
    format!(
        "<domain type='qemu'>
  <name>{NAME}</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>console=ttyS0 quiet panic=-1</cmdline>
  </os>
  <features><acpi/></features>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <filesystem type='mount' accessmode='passthrough'>
      <driver type='virtiofs' queue='1024'/>
      <binary {binary} xattr='on'>
        <cache mode='always'/>
        <lock posix='on' flock='on'/>
      </binary>
      <source dir='{shared}'/>
      <target dir='{TAG}'/>
    </filesystem>
    <serial type='file'><source path='{console}'/><target port='0'/></serial>
    <console type='file'><source path='{console}'/><target type='serial' port='0'/></console>
    <memballoon model='none'/>
  </devices>
</domain>
",
        kernel = kernel().display(),
        initrd = initrd.display(),
        shared = shared.display(),
        console = dir.join("console.log").display(),
    )
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10, a guest kernel, libvirt 9 (root)"
)]
fn libvirt_starts_vbmq_as_virtiofsd_and_the_guest_uses_the_share() {
    let vbmq = Path::new(env!("CARGO_BIN_EXE_vbmq"));
    // <binary path='.../vbmq'/>.
    boot(
        "libvirt-binary",
        &format!("path='{}'", vbmq.display()),
        None,
    );
    // No <binary path>: libvirt takes contrib/vhost-user/40-vbmq-fs.json, filled in as
    // scripts/install.sh fills it.
    let json = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/vhost-user/40-vbmq-fs.json"),
    )
    .unwrap()
    .replace("@BINARY@", &vbmq.display().to_string());
    boot("libvirt-descriptor", "", Some(&json));
}

/// Boots the guest under a libvirtd of its own, with `binary` in the domain's `<binary>` and
/// `descriptor` as the only vhost-user descriptor, and checks what the guest and libvirt did.
fn boot(name: &str, binary: &str, descriptor: Option<&str>) {
    let vbmq = Path::new(env!("CARGO_BIN_EXE_vbmq"));
    let dir = TestDir::new(name);
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("from-host"), "written by the host\n").unwrap();
    let initrd = dir.join("initrd");
    Vm::initramfs(
        &script(&format!(
            "mount -t virtiofs {TAG} /mnt
             echo \"HOST-SAYS $(cat /mnt/from-host)\"
             echo written by the guest > /mnt/from-guest
             sync
             umount /mnt"
        )),
        &[],
        &initrd,
    );
    let libvirtd = Libvirtd::start(&dir.join("libvirt"), descriptor);
    let xml = dir.join("domain.xml");
    std::fs::write(&xml, domain_xml(dir.path(), &shared, &initrd, binary)).unwrap();
    let created = libvirtd.virsh(&["create", xml.to_str().unwrap()]);
    let qemu_log = || libvirtd.log(&format!("log/qemu/{NAME}.log"));
    let backend_log = || libvirtd.log(&format!("log/qemu/{NAME}-fs0-virtiofsd.log"));
    assert!(
        created.status.success(),
        "virsh create: {}\n--- domain log ---\n{}\n--- backend log ---\n{}",
        String::from_utf8_lossy(&created.stderr),
        qemu_log(),
        backend_log()
    );
    let console = dir.join("console.log");
    let deadline = Instant::now() + Duration::from_secs(300);
    let run = loop {
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        if let Some(run) = result_of(&[text.replace('\r', "")]) {
            break run;
        }
        assert!(
            Instant::now() < deadline,
            "no result from the guest; console:\n{text}\n--- backend log ---\n{}",
            backend_log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let context = format!(
        "console:\n{}\n--- domain log ---\n{}\n--- backend log ---\n{}",
        run.console,
        qemu_log(),
        backend_log()
    );
    assert_eq!(run.status, 0, "{context}");
    assert!(
        run.output.contains("HOST-SAYS written by the host"),
        "{context}"
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("from-guest")).unwrap_or_default(),
        "written by the guest\n",
        "{context}"
    );
    // libvirt ran vbmq (not a virtiofsd) with virtiofsd's legacy options, and vbmq said it
    // was ready as virtiofsd does.
    let log = qemu_log();
    let command = log
        .lines()
        .skip_while(|line| !line.contains("Starting external device: virtiofsd"))
        .nth(1)
        .unwrap_or_default();
    assert!(
        command.starts_with(&vbmq.display().to_string()),
        "{context}"
    );
    assert!(command.contains("--fd="), "{context}");
    assert!(command.contains("source="), "{context}");
    assert!(
        backend_log().contains("Waiting for vhost-user socket connection..."),
        "{context}"
    );
}
