//! `vbmq virtiofsd` under the options that ask the kernel to confine a share: `--uid-map` and
//! `--gid-map` serve it in a user namespace (as virtiofsd does), so the guest's root has no power
//! over files whose owner is outside the map; `--sandbox namespace|chroot` is refused where the
//! kernel has no Landlock, the wall vbmq gives for it. Driven through the socket by the
//! user-space virtio-fs client, which sets each request's uid and gid as a guest kernel does.

#[path = "common/no_landlock.rs"]
mod no_landlock;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{
    self, CreateIn, EntryOut, FATTR_GID, FATTR_MODE, FATTR_UID, MkdirIn, Opcode, OutHeader,
    ROOT_ID, SetattrIn,
};

const READY: &str = "Waiting for vhost-user socket connection...";
/// The map of every test here: the guest's 0..65536 are the host's 100000..165536.
const MAP: [&str; 2] = ["--uid-map=:0:100000:65536:", "--gid-map=:0:100000:65536:"];
const BASE: u32 = 100_000;
/// The overflow IDs, as the kernel shows an owner outside a user namespace's map.
const OVERFLOW: u32 = 65534;
/// An ID the guest may name that the map does not cover.
const UNMAPPED: u32 = 70_000;

struct Daemon {
    child: Child,
    dir: PathBuf,
}

/// `<tmp>/vbmq-confined-PID-NAME/share`, holding `file` (host root's, 0644, unmapped) and
/// `guests` (the guest's uid 5, mapped), the share itself the guest root's, mode 0777.
fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vbmq-confined-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(dir.join("share/file"), b"host bytes").unwrap();
    std::fs::set_permissions(
        dir.join("share/file"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(dir.join("share/guests"), b"guest bytes").unwrap();
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let chown = |name: &str, id| std::os::unix::fs::chown(dir.join(name), Some(id), Some(id));
        chown("share/guests", BASE + 5).unwrap();
        chown("share", BASE).unwrap();
    }
    // Any guest user may make files in it.
    std::fs::set_permissions(dir.join("share"), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

impl Daemon {
    /// `vbmq virtiofsd --socket-path DIR/fs.sock --shared-dir DIR/share ARGS`, its stderr in
    /// DIR/stderr, without Landlock if asked.
    fn spawn(name: &str, args: &[&str], landlock: bool) -> Self {
        let dir = test_dir(name);
        let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        command
            .arg("virtiofsd")
            .arg(format!("--socket-path={}", dir.join("fs.sock").display()))
            .arg(format!("--shared-dir={}", dir.join("share").display()))
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("stderr")).unwrap());
        if !landlock {
            // SAFETY: between fork and exec the closure makes only async-signal-safe system
            // calls (prctl) on memory it owns.
            unsafe { command.pre_exec(no_landlock::no_landlock) };
        }
        let child = command.spawn().unwrap();
        Daemon { child, dir }
    }

    /// As [`Self::spawn`], once it printed virtiofsd's readiness line.
    fn start(name: &str, args: &[&str], landlock: bool) -> Self {
        let mut daemon = Self::spawn(name, args, landlock);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !daemon.log().lines().any(|line| line == READY) {
            assert!(daemon.alive(), "exited: {}", daemon.log());
            assert!(Instant::now() < deadline, "not ready: {}", daemon.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        daemon
    }

    /// The exit status, once it exited by itself.
    fn exit_status(&mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "still running: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn client(&self) -> FsClient {
        FsClient::connect(&self.dir.join("fs.sock")).unwrap()
    }

    fn host(&self, name: &str) -> PathBuf {
        self.dir.join("share").join(name)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// SETATTR of `node` with `attr` (its `valid` set): the reply's errno.
fn setattr(client: &mut FsClient, node: u64, attr: SetattrIn) -> i32 {
    let (out, _) = client
        .call(Opcode::Setattr, node, fuse::args(&attr), &[], 4096)
        .unwrap();
    -out.error
}

/// `opcode` with `args` on `name` in the share's root, sent by the guest's `ids`.
fn call_in_root(
    client: &mut FsClient,
    ids: (u32, u32),
    opcode: Opcode,
    args: &[u8],
    name: &str,
) -> (OutHeader, Vec<u8>) {
    client
        .call_as(ids, opcode, ROOT_ID, args, &[name.as_bytes()], 4096)
        .unwrap()
}

/// MKDIR of `name` in the share's root by the guest's `ids`: the errno, and the entry made.
fn mkdir_as(client: &mut FsClient, ids: (u32, u32), name: &str) -> (i32, Option<EntryOut>) {
    let args = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let (out, body) = call_in_root(client, ids, Opcode::Mkdir, fuse::args(&args), name);
    let entry = body
        .get(..size_of::<EntryOut>())
        .and_then(vm_memory::ByteValued::from_slice)
        .copied();
    (-out.error, entry)
}

/// CREATE of `name` in the share's root by the guest's `ids`: the errno.
fn create_as(client: &mut FsClient, ids: (u32, u32), name: &str) -> i32 {
    let args = CreateIn {
        flags: libc::O_RDWR as u32,
        mode: 0o644,
        umask: 0,
        fuse_flags: 0,
    };
    let (out, _) = call_in_root(client, ids, Opcode::Create, fuse::args(&args), name);
    -out.error
}

/// With `--uid-map/--gid-map`, host root (outside the map) is no one to the guest: its file
/// shows the overflow owner, and the guest's root can neither write, chmod nor chown it; a
/// file whose owner is mapped stays the guest root's to change.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root to write a user namespace's maps"
)]
fn the_guest_root_has_no_power_over_an_unmapped_owners_file() {
    let daemon = Daemon::start("owner", &MAP, true);
    let mut client = daemon.client();
    let file = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!((file.attr.uid, file.attr.gid), (OVERFLOW, OVERFLOW));
    let guests = client.lookup(ROOT_ID, "guests").unwrap();
    assert_eq!((guests.attr.uid, guests.attr.gid), (5, 5));

    let refused = client.open(file.nodeid, libc::O_RDWR as u32).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EACCES));
    let refused = client.open(file.nodeid, libc::O_WRONLY as u32).unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EACCES));
    let fh = client.open(file.nodeid, libc::O_RDONLY as u32).unwrap();
    client.release(file.nodeid, fh).unwrap();
    let chmod = SetattrIn {
        valid: FATTR_MODE,
        mode: 0o100_666,
        ..SetattrIn::default()
    };
    assert_eq!(setattr(&mut client, file.nodeid, chmod), libc::EPERM);
    let chown = SetattrIn {
        valid: FATTR_UID | FATTR_GID,
        uid: 0,
        gid: 0,
        ..SetattrIn::default()
    };
    assert_eq!(setattr(&mut client, file.nodeid, chown), libc::EPERM);
    let meta = std::fs::metadata(daemon.host("file")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o644)
    );
    assert_eq!(std::fs::read(daemon.host("file")).unwrap(), b"host bytes");

    // A mapped owner's file: the guest's root may chmod and chown it, within the map.
    assert_eq!(setattr(&mut client, guests.nodeid, chmod), 0);
    let to_guest_7 = SetattrIn {
        uid: 7,
        gid: 7,
        ..chown
    };
    assert_eq!(setattr(&mut client, guests.nodeid, to_guest_7), 0);
    let meta = std::fs::metadata(daemon.host("guests")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (BASE + 7, BASE + 7, 0o666)
    );
    // ...but not give it to an ID outside the map.
    let to_unmapped = SetattrIn {
        uid: UNMAPPED,
        gid: UNMAPPED,
        ..chown
    };
    assert_eq!(
        setattr(&mut client, guests.nodeid, to_unmapped),
        libc::EINVAL
    );
    let to_no_one = SetattrIn {
        uid: u32::MAX,
        gid: u32::MAX,
        ..chown
    };
    assert_eq!(setattr(&mut client, guests.nodeid, to_no_one), libc::EINVAL);
    assert_eq!(
        std::fs::metadata(daemon.host("guests")).unwrap().uid(),
        BASE + 7
    );
}

/// A request whose uid or gid is `-1` or outside the map makes nothing; one from a mapped
/// user makes a file that user owns, on the host through the map.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root to write a user namespace's maps"
)]
fn requests_from_unmapped_or_no_ids_are_refused_and_make_nothing() {
    let daemon = Daemon::start("creds", &MAP, true);
    let mut client = daemon.client();
    for (i, ids) in [
        (u32::MAX, 0),
        (0, u32::MAX),
        (u32::MAX, u32::MAX),
        (UNMAPPED, 0),
        (0, UNMAPPED),
    ]
    .into_iter()
    .enumerate()
    {
        let (dir, file) = (format!("dir{i}"), format!("file{i}"));
        let (errno, _) = mkdir_as(&mut client, ids, &dir);
        assert_eq!(errno, libc::EINVAL, "mkdir by {ids:?}");
        assert_eq!(create_as(&mut client, ids, &file), libc::EINVAL, "{ids:?}");
        assert!(!daemon.host(&dir).exists(), "{ids:?}");
        assert!(!daemon.host(&file).exists(), "{ids:?}");
    }
    let (errno, made) = mkdir_as(&mut client, (5, 6), "made");
    assert_eq!(errno, 0);
    let made = made.unwrap();
    assert_eq!((made.attr.uid, made.attr.gid), (5, 6));
    let meta = std::fs::metadata(daemon.host("made")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (BASE + 5, BASE + 6));
}

/// A share without maps (vbmq as root) makes nothing for a request naming no one (uid or gid
/// `-1`): the passthrough's `setresuid(-1, -1, -1)` would leave the file root's.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: as root, a file made by no one would be root's"
)]
fn a_request_from_no_one_makes_nothing_on_a_share_without_maps() {
    let daemon = Daemon::start("no-one", &[], true);
    let mut client = daemon.client();
    for (i, ids) in [(u32::MAX, 0), (0, u32::MAX)].into_iter().enumerate() {
        let (dir, file) = (format!("dir{i}"), format!("file{i}"));
        assert_eq!(mkdir_as(&mut client, ids, &dir).0, libc::EINVAL, "{ids:?}");
        assert_eq!(create_as(&mut client, ids, &file), libc::EINVAL, "{ids:?}");
        assert!(!daemon.host(&dir).exists() && !daemon.host(&file).exists());
    }
    let (errno, made) = mkdir_as(&mut client, (5, 6), "made");
    assert_eq!(errno, 0);
    assert_eq!(made.map(|e| (e.attr.uid, e.attr.gid)), Some((5, 6)));
}

/// Maps that are not one to one are refused at start, with one line and status 1, as
/// virtiofsd's (the kernel's) refusal.
#[test]
fn overlapping_id_maps_are_refused_at_start() {
    for (name, maps) in [
        (
            "inside",
            ["--uid-map=:0:100000:10:", "--uid-map=:5:200000:10:"],
        ),
        (
            "outside",
            ["--gid-map=:0:100000:10:", "--gid-map=:20:100005:1:"],
        ),
    ] {
        let mut daemon = Daemon::spawn(name, &maps, true);
        assert_eq!(daemon.exit_status(), Some(1), "{}", daemon.log());
        let log = daemon.log();
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(log.contains("overlap"), "{log}");
    }
}

/// `--sandbox namespace` and `chroot` (`-o sandbox=` too) ask for a wall the kernel keeps:
/// without Landlock vbmq has none to give, and says so instead of serving; `--sandbox none`
/// (KubeVirt, Kata's runtime-rs) still serves there.
#[test]
fn a_sandbox_is_refused_where_the_kernel_has_no_landlock() {
    for option in [
        "--sandbox=namespace",
        "--sandbox=chroot",
        "-o sandbox=chroot",
    ] {
        let args: Vec<&str> = option.split(' ').collect();
        let mut daemon = Daemon::spawn("no-wall", &args, false);
        assert_eq!(daemon.exit_status(), Some(1), "{option}: {}", daemon.log());
        let log = daemon.log();
        let refusals: Vec<&str> = log.lines().filter(|l| l.contains("no Landlock")).collect();
        assert_eq!(refusals.len(), 1, "{option}: {log}");
        assert!(!log.contains(READY), "{option}: {log}");
    }
    let daemon = Daemon::start("none", &["--sandbox=none"], false);
    assert!(daemon.log().contains("landlock: not supported"));
    let mut client = daemon.client();
    assert_eq!(client.lookup(ROOT_ID, "file").unwrap().attr.size, 10);
}
