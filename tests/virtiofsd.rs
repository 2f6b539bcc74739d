//! `vbmq virtiofsd`, the real process started with virtiofsd's command line as the management
//! stacks start it, driven through its socket by the user-space virtio-fs client: it says it is
//! ready as virtiofsd does, serves reads and writes, honours `--readonly` and `--xattr`, takes a
//! socket libvirt bound (`--fd`), answers `--print-capabilities` also when started by the name
//! `virtiofsd`, refuses what it does not do, and ends at once on SIGTERM.

mod common;
#[path = "common/inherit_fd.rs"]
mod inherit_fd;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fs::refuses_a_writable_open;
use common::xattr::get_xattr;
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, Opcode, ROOT_ID, SetxattrIn, WriteIn};

const READY: &str = "Waiting for vhost-user socket connection...";

struct Daemon {
    child: Child,
    dir: PathBuf,
}

fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vbmq-vfsd-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    std::fs::write(dir.join("share/file"), b"host bytes").unwrap();
    dir
}

impl Daemon {
    /// `vbmq virtiofsd --socket-path DIR/fs.sock --shared-dir DIR/share ARGS`, once it printed
    /// virtiofsd's readiness line.
    fn start(name: &str, args: &[&str]) -> Self {
        Self::start_in(test_dir(name), args)
    }

    /// As [`Self::start`], over `dir` as the caller prepared it.
    fn start_in(dir: PathBuf, args: &[&str]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        command
            .arg("virtiofsd")
            .arg("--socket-path")
            .arg(dir.join("fs.sock"))
            .arg(format!("--shared-dir={}", dir.join("share").display()))
            .args(args);
        Self::spawn(dir, command)
    }

    fn spawn(dir: PathBuf, mut command: Command) -> Self {
        let child = command
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut daemon = Daemon { child, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !daemon.log().lines().any(|line| line == READY) {
            assert!(daemon.alive(), "exited: {}", daemon.log());
            assert!(
                Instant::now() < deadline,
                "no readiness line: {}",
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("fs.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Sends SIGTERM; returns how long the process took to exit.
    fn terminate(&mut self) -> Duration {
        let start = Instant::now();
        let pid = libc::pid_t::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        while self.alive() {
            assert!(start.elapsed() < Duration::from_secs(30), "still running");
            std::thread::sleep(Duration::from_millis(5));
        }
        start.elapsed()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// WRITE of `data` at `offset` of handle `fh`: the reply's error (0) and the bytes written.
fn write(client: &mut FsClient, node: u64, fh: u64, data: &[u8]) -> (i32, u32) {
    let args = WriteIn {
        fh,
        size: u32::try_from(data.len()).unwrap(),
        ..WriteIn::default()
    };
    let body = [fuse::args(&args), data].concat();
    let (out, reply) = client.call(Opcode::Write, node, &body, &[], 4096).unwrap();
    let written = reply
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
    (-out.error, written)
}

/// SETXATTR of `user.vbmq` on `node`: the reply's errno.
fn setxattr(client: &mut FsClient, node: u64) -> i32 {
    let value = b"v";
    let args = SetxattrIn { size: 1, flags: 0 };
    let body = [fuse::args(&args), b"user.vbmq\0", value].concat();
    let (out, _) = client
        .call(Opcode::Setxattr, node, &body, &[], 4096)
        .unwrap();
    -out.error
}

#[test]
fn it_says_ready_as_virtiofsd_and_serves_reads_and_writes() {
    let mut daemon = Daemon::start("rw", &["--cache", "never", "--sandbox", "none"]);
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(entry.attr.size, 10);
    let fh = client.open(entry.nodeid, libc::O_RDWR as u32).unwrap();
    let request = client.read_request(entry.nodeid, fh, 0, 4096);
    client.submit(0, &request, 16 + 4096).unwrap();
    client.kick().unwrap();
    client.wait(Duration::from_secs(10)).expect("a read reply");
    assert_eq!(client.reply_header(0).unwrap().error, 0);
    assert_eq!(write(&mut client, entry.nodeid, fh, b"guest"), (0, 5));
    client.release(entry.nodeid, fh).unwrap();
    assert_eq!(
        std::fs::read(daemon.dir.join("share/file")).unwrap(),
        b"guestbytes"
    );
    assert!(daemon.alive());
}

#[test]
fn readonly_refuses_writes() {
    let daemon = Daemon::start("ro", &["--readonly"]);
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    refuses_a_writable_open(&mut client);
    let (out, _) = client
        .call(Opcode::Unlink, ROOT_ID, &[], &[b"file"], 4096)
        .unwrap();
    assert_eq!(-out.error, libc::EROFS);
    assert!(daemon.dir.join("share/file").exists());
}

/// virtiofsd serves no xattrs unless given `--xattr` (`-o xattr`): SETXATTR answers ENOSYS,
/// which the guest kernel takes as "not supported".
#[test]
fn xattrs_only_with_xattr() {
    for (args, served) in [
        (&[][..], false),
        (&["-o", "no_xattr"][..], false),
        (&["--xattr"][..], true),
        (&["-o", "xattr"][..], true),
        (&["--posix-acl"][..], true),
    ] {
        let daemon = Daemon::start("xattr", args);
        let mut client = FsClient::connect(&daemon.socket()).unwrap();
        let entry = client.lookup(ROOT_ID, "file").unwrap();
        let errno = setxattr(&mut client, entry.nodeid);
        if served {
            // Served: set, or refused by the host's file system (tmpfs without user xattrs).
            assert!(
                errno == 0 || errno == libc::EOPNOTSUPP,
                "{args:?}: errno {errno}"
            );
        } else {
            assert_eq!(errno, libc::ENOSYS, "{args:?}");
        }
    }
}

#[test]
fn sigterm_ends_it_at_once_with_a_frontend_connected() {
    let mut daemon = Daemon::start("term", &[]);
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    client.lookup(ROOT_ID, "file").unwrap();
    let took = daemon.terminate();
    assert!(took < Duration::from_secs(2), "SIGTERM took {took:?}");
    let status = daemon.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
}

/// libvirt binds and listens on the socket itself and passes it as `--fd=N` (with the legacy
/// `-o source=`): vbmq serves it, and leaves no file of its own behind.
#[test]
fn an_inherited_listening_socket_is_served() {
    let dir = test_dir("fd");
    let socket = dir.join("libvirt.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let fd = listener.as_raw_fd();
    let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    inherit_fd::inherit_fd(&mut command, fd);
    command
        .arg("virtiofsd")
        .arg(format!("--fd={fd}"))
        .arg("-o")
        .arg(format!(
            "source={},cache=always,sandbox=chroot,xattr",
            dir.join("share").display()
        ));
    let mut daemon = Daemon::spawn(dir, command);
    drop(listener);
    let mut client = FsClient::connect(&socket).unwrap();
    assert_eq!(client.lookup(ROOT_ID, "file").unwrap().attr.size, 10);
    drop(client);
    daemon.terminate();
    assert!(socket.exists(), "libvirt's socket is libvirt's to remove");
    let lock = PathBuf::from(format!("{}.lock", socket.display()));
    assert!(!lock.exists());
}

#[test]
fn a_descriptor_that_is_not_a_listening_socket_is_refused() {
    let dir = test_dir("badfd");
    let file = std::fs::File::open(dir.join("share/file")).unwrap();
    let fd = file.as_raw_fd();
    let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    inherit_fd::inherit_fd(&mut command, fd);
    let output = command
        .arg("virtiofsd")
        .arg(format!("--fd={fd}"))
        .arg(format!("--shared-dir={}", dir.join("share").display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a listening Unix socket"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// What `command --print-capabilities` prints: QEMU's JSON of a virtio-fs backend.
fn capabilities(mut command: Command) -> serde_json::Value {
    let output = command.arg("--print-capabilities").output().unwrap();
    assert!(output.status.success());
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["type"], "fs");
    json
}

/// Started by the name `virtiofsd` (a link, or a descriptor's `binary`), it is virtiofsd:
/// `--print-capabilities` is QEMU's JSON, an option it does not take is refused with one line
/// and status 1.
#[test]
fn started_as_virtiofsd_it_prints_its_capabilities_and_refuses_the_unknown() {
    let dir = test_dir("argv0");
    let link = dir.join("virtiofsd");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_vbmq"), &link).unwrap();
    let json = capabilities(Command::new(&link));
    let features = json["features"].as_array().unwrap();
    assert!(features.iter().any(|f| f == "separate-options"));
    assert!(features.iter().any(|f| f == "migrate-precopy"));
    for args in [
        &["--shared-dir", "/tmp", "--socket-path", "/tmp/x", "--frob"][..],
        &[
            "--socket-path=SOCKET",
            "-o",
            "source=/tmp,modcaps=+sys_admin",
        ][..],
        // A bad rule. No `--fd=3` in these: a descriptor 3 another test thread let the child
        // inherit can be a listening socket, and a command line vbmq takes then serves for good.
        &[
            "--shared-dir=/tmp",
            "--socket-path=SOCKET",
            "--xattrmap=:bad:x:y:",
        ][..],
    ] {
        let socket = dir.join("refused.sock");
        let args: Vec<String> = args
            .iter()
            .map(|a| a.replace("SOCKET", socket.to_str().unwrap()))
            .collect();
        let output = Command::new(&link).args(&args).output().unwrap();
        let mut stderr = String::new();
        output
            .stderr
            .as_slice()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(dir);
    assert!(!Path::new(&link).exists());
}

/// A directory that is another mount on the host carries FUSE_ATTR_SUBMOUNT (virtiofsd's
/// default `--announce-submounts`), so that the guest mounts it apart; not with
/// `--no-announce-submounts`, and never on a plain directory. Mounted before the start: a share
/// served from a mount of its own (root) sees the host's mounts beneath it as they were then.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root to mount a tmpfs inside the share"
)]
fn host_mount_points_are_announced_as_submounts() {
    for (args, announced) in [(&[][..], true), (&["--no-announce-submounts"][..], false)] {
        let dir = test_dir("submount");
        let mount = dir.join("share/mnt");
        std::fs::create_dir(&mount).unwrap();
        std::fs::create_dir(dir.join("share/plain")).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "vbmq-test", mount.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(status.success());
        let daemon = Daemon::start_in(dir, args);
        let mut client = FsClient::connect(&daemon.socket()).unwrap();
        let flags = client.lookup(ROOT_ID, "mnt").map(|e| e.attr.flags);
        let plain = client.lookup(ROOT_ID, "plain").unwrap().attr.flags;
        drop(client);
        // Detached at once (MNT_DETACH): vbmq may still hold the mount's root open until it has
        // ended the session, and a busy mount left behind would outlive the test.
        let status = Command::new("umount")
            .arg("-l")
            .arg(&mount)
            .status()
            .unwrap();
        assert!(status.success(), "umount -l {}", mount.display());
        // FUSE_ATTR_SUBMOUNT (include/uapi/linux/fuse.h).
        let submount = 1 << 0;
        assert_eq!(flags.unwrap() & submount != 0, announced, "{args:?}");
        assert_eq!(plain & submount, 0);
    }
}

/// libvirt runs `<binary path='.../vbmq'/>` (and a vhost-user descriptor's binary) with
/// virtiofsd's options alone: options before any subcommand make vbmq virtiofsd.
#[test]
fn options_before_any_subcommand_are_virtiofsds() {
    capabilities(Command::new(env!("CARGO_BIN_EXE_vbmq")));
    let output = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("virtiofsd"));
}

/// `--xattrmap` with virtiofsd's rules: `:map::user.virtiofs.:` keeps the guest's xattrs under
/// `user.virtiofs.` on the host, and hides the host's other xattrs from the guest.
#[test]
fn an_xattr_map_translates_names_both_ways() {
    let daemon = Daemon::start("xattrmap", &["--xattrmap=:map::user.virtiofs.:"]);
    let file = daemon.dir.join("share/file");
    let (path, name, value) = (
        std::ffi::CString::new(file.as_os_str().as_encoded_bytes()).unwrap(),
        c"user.host-only",
        b"h",
    );
    // SAFETY: setxattr reads the strings and the value passed.
    let set = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), 1, 0) };
    assert_eq!(set, 0, "the test needs a host file system with user xattrs");
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(setxattr(&mut client, entry.nodeid), 0);
    assert_eq!(
        get_xattr(&file, "user.virtiofs.user.vbmq").as_deref(),
        Some(&b"v"[..])
    );
    assert_eq!(get_xattr(&file, "user.vbmq"), None);
    let args = fuse::GetxattrIn {
        size: 4096,
        ..Default::default()
    };
    let (out, names) = client
        .call(
            Opcode::Listxattr,
            entry.nodeid,
            fuse::args(&args),
            &[],
            8192,
        )
        .unwrap();
    assert_eq!(out.error, 0);
    assert_eq!(names, b"user.vbmq\0", "{}", String::from_utf8_lossy(&names));
}

/// `--syslog` (Kata, Proxmox): the process keeps serving and logging once confined (glibc's
/// syslog(3) opened a new socket per line without /dev/log, which the seccomp filter killed),
/// and logs to stderr when there is no syslog to reach.
#[test]
fn syslog_logging_survives_confinement() {
    let mut daemon = Daemon::start("syslog", &["--syslog", "--log-level", "debug"]);
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    assert_eq!(client.lookup(ROOT_ID, "file").unwrap().attr.size, 10);
    drop(client);
    daemon.terminate();
    let status = daemon.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
}

/// KubeVirt runs virtiofsd as a non-root user with every capability dropped
/// (`--socket-path=S --shared-dir=D --sandbox=none --cache=auto`): vbmq confines itself without
/// privilege and serves the user's files.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root to start vbmq as another user"
)]
fn kubevirts_unprivileged_command_line_serves() {
    let dir = test_dir("kubevirt");
    for path in [dir.clone(), dir.join("share"), dir.join("share/file")] {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_vbmq"))
        .arg("virtiofsd")
        .arg(format!("--socket-path={}", dir.join("fs.sock").display()))
        .arg(format!("--shared-dir={}", dir.join("share").display()))
        .args(["--sandbox=none", "--cache=auto"]);
    let mut daemon = Daemon::spawn(dir, command);
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).unwrap();
    assert!(
        status.contains("\nUid:\t65534\t65534\t65534\t65534\n"),
        "{status}"
    );
    assert!(status.contains("\nCapEff:\t0000000000000000\n"), "{status}");
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(entry.attr.uid, 65534);
    let fh = client.open(entry.nodeid, libc::O_RDWR as u32).unwrap();
    assert_eq!(write(&mut client, entry.nodeid, fh, b"kube"), (0, 4));
    drop(client);
    let status = daemon.terminate();
    assert!(status < Duration::from_secs(2));
    assert_eq!(
        std::fs::read(daemon.dir.join("share/file")).unwrap(),
        b"kube bytes"
    );
}

/// `--translate-uid map:0:4242:1` (and gid): the guest's root is the host's 4242. A file the
/// host's 4242 owns is root's in the guest, and a directory the guest's root makes is 4242's
/// on the host.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root to give files to other users"
)]
fn translated_ids_go_both_ways() {
    let daemon = Daemon::start(
        "translate",
        &[
            "--translate-uid",
            "map:0:4242:1",
            "--translate-gid=map:0:4343:1",
        ],
    );
    let file = daemon.dir.join("share/file");
    std::os::unix::fs::chown(&file, Some(4242), Some(4343)).unwrap();
    // The host's 4242 may make directories in the share (the guest's root is no root here).
    std::os::unix::fs::chown(daemon.dir.join("share"), Some(4242), Some(4343)).unwrap();
    let mut client = FsClient::connect(&daemon.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!((entry.attr.uid, entry.attr.gid), (0, 0));
    let args = fuse::MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let (out, body) = client
        .call(Opcode::Mkdir, ROOT_ID, fuse::args(&args), &[b"made"], 4096)
        .unwrap();
    assert_eq!(out.error, 0);
    let made: fuse::EntryOut =
        vm_memory::ByteValued::from_slice(&body[..size_of::<fuse::EntryOut>()])
            .copied()
            .unwrap();
    assert_eq!((made.attr.uid, made.attr.gid), (0, 0));
    use std::os::unix::fs::MetadataExt;
    let host = std::fs::metadata(daemon.dir.join("share/made")).unwrap();
    assert_eq!((host.uid(), host.gid()), (4242, 4343));
}

/// The flags of vbmq's INIT answer to a client offering POSIX ACLs and submounts.
fn init_flags(args: &[&str]) -> u32 {
    let daemon = Daemon::start("init", args);
    let mut client = FsClient::connect_without_init(&daemon.socket()).unwrap();
    let init = fuse::InitIn {
        major: fuse::KERNEL_VERSION,
        minor: fuse::KERNEL_MINOR_VERSION,
        max_readahead: 1 << 20,
        flags: POSIX_ACL | SUBMOUNTS,
    };
    let (out, body) = client
        .call(Opcode::Init, 0, fuse::args(&init), &[], 4096)
        .unwrap();
    assert_eq!(out.error, 0);
    let init_out: fuse::InitOut =
        vm_memory::ByteValued::from_slice(&body[..size_of::<fuse::InitOut>()])
            .copied()
            .unwrap();
    init_out.flags
}

/// FUSE_POSIX_ACL and FUSE_SUBMOUNTS (include/uapi/linux/fuse.h).
const POSIX_ACL: u32 = 1 << 20;
const SUBMOUNTS: u32 = 1 << 27;

/// `--posix-acl` makes INIT agree to POSIX ACLs (the guest kernel then enforces them and asks
/// for `system.posix_acl_*`), `--announce-submounts` (the default) to submounts.
#[test]
fn init_agrees_to_posix_acls_and_submounts_as_told() {
    let flags = init_flags(&[]);
    assert_eq!((flags & POSIX_ACL, flags & SUBMOUNTS), (0, SUBMOUNTS));
    let flags = init_flags(&["--posix-acl", "--no-announce-submounts"]);
    assert_eq!((flags & POSIX_ACL, flags & SUBMOUNTS), (POSIX_ACL, 0));
}

/// Every stack's command line of issue 26's table, run as the stack runs it (an inherited
/// listening socket where the stack passes `--fd`), serves the share.
#[test]
fn every_stacks_command_line_starts_a_working_share() {
    let lines = [
        // libvirt, separate options and legacy.
        "--fd={fd} --shared-dir {dir} --cache always --sandbox chroot --xattr \
         --thread-pool-size=4 --rlimit-nofile=4096 --log-level debug",
        "--fd={fd} -o source={dir},cache=always,sandbox=chroot,xattr,flock,posix_lock -d",
        "--fd={fd} --shared-dir {dir} --uid-map=:0:0:65536: --gid-map=:0:0:65536:",
        // Kata Containers and its runtime-rs.
        "--syslog --cache=auto --shared-dir={dir} --fd={fd} --thread-pool-size=1 \
         --announce-submounts --inode-file-handles=prefer",
        "--syslog --cache=always --shared-dir={dir} --fd={fd} -o announce_submounts",
        "--socket-path {sock} --shared-dir {dir} --cache never --sandbox none --seccomp none",
        // KubeVirt.
        "--socket-path={sock} --shared-dir={dir} --sandbox=none --cache=auto",
        // Proxmox VE.
        "--fd={fd} --shared-dir={dir} --xattr --posix-acl --announce-submounts \
         --allow-direct-io --cache=always --syslog",
    ];
    for (i, line) in lines.iter().enumerate() {
        let dir = test_dir(&format!("stack{i}"));
        let socket = dir.join("fs.sock");
        let listener = line
            .contains("{fd}")
            .then(|| UnixListener::bind(&socket).unwrap());
        let text = line
            .replace("{dir}", &dir.join("share").display().to_string())
            .replace("{sock}", &socket.display().to_string())
            .replace(
                "{fd}",
                &listener.as_ref().map_or(-1, |l| l.as_raw_fd()).to_string(),
            );
        let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        if let Some(listener) = &listener {
            inherit_fd::inherit_fd(&mut command, listener.as_raw_fd());
        }
        command.args(text.split_whitespace());
        let mut daemon = Daemon::spawn(dir, command);
        drop(listener);
        let mut client = FsClient::connect(&socket).unwrap();
        assert_eq!(
            client.lookup(ROOT_ID, "file").unwrap().attr.size,
            10,
            "{line}"
        );
        drop(client);
        assert!(daemon.terminate() < Duration::from_secs(2), "{line}");
    }
}

/// The protocol features vbmq offers on `socket`, and its configuration space when CONFIG is
/// among them.
fn offered_config(socket: &Path) -> Option<Vec<u8>> {
    use vhost::VhostBackend;
    use vhost::vhost_user::message::VhostUserConfigFlags;
    use vhost::vhost_user::{Frontend, VhostUserFrontend, VhostUserProtocolFeatures};
    let mut frontend = Frontend::connect(socket, 2).unwrap();
    frontend.set_owner().unwrap();
    frontend.get_features().unwrap();
    let protocol = frontend.get_protocol_features().unwrap();
    if !protocol.contains(VhostUserProtocolFeatures::CONFIG) {
        return None;
    }
    frontend.set_protocol_features(protocol).unwrap();
    let buf = vec![0u8; 40];
    let (_, config) = frontend
        .get_config(0, 40, VhostUserConfigFlags::empty(), &buf)
        .unwrap();
    Some(config)
}

/// `--tag` offers the configuration space (the tag and the number of request queues) through
/// vhost-user's CONFIG, as virtiofsd does; without it nothing is offered (QEMU keeps its own).
#[test]
fn tag_offers_the_configuration_space() {
    let daemon = Daemon::start("tag", &["--tag", "myfs"]);
    let config = offered_config(&daemon.socket()).expect("CONFIG offered with --tag");
    assert_eq!(&config[..5], b"myfs\0");
    assert_eq!(u32::from_le_bytes(config[36..40].try_into().unwrap()), 1);
    drop(daemon);
    let daemon = Daemon::start("notag", &[]);
    assert_eq!(offered_config(&daemon.socket()), None);
}
