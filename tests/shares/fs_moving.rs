//! A frontend with no file system of its own changes nothing outside a share while the host
//! moves directories in and out of it during requests: `vbmq serve --fs` driven by the
//! user-space virtio-fs client, which hammers CREATE, MKDIR, SETATTR, SETXATTR, RENAME,
//! LOOKUP `..` and UNLINK through the directories it holds, and climbs `..` from wherever it
//! is towards a canary tree that was never inside, while a host thread keeps moving those
//! directories between the share and a directory beside it. Run on both walls a start can
//! get (SECURITY.md): the share's own mount (root) and its directory alone (no
//! `CAP_SYS_ADMIN`), the check then the only wall beneath Landlock.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::Daemon;
use crate::common::fs::{Inode, setxattr_args};
use crate::common::serve::Serve;
use crate::common::xattr::{set_xattr, xattrs};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, CreateIn, MkdirIn, Opcode, ROOT_ID, RenameIn, SetattrIn};

/// The directories the host moves in and out, each with a file and a subdirectory.
const MOVED: [&str; 4] = ["m0", "m1", "m2", "m3"];
/// At least this many requests must meet a directory while it is out (or the race was not run).
const MET_OUTSIDE: usize = 20;
/// At least this many rounds of requests.
const ROUNDS: usize = 150;
/// Against a hang only: the rounds end far sooner on a loaded machine.
const HARD_LIMIT: Duration = Duration::from_secs(120);
/// `linux/capability.h` (libc names no capability).
const CAP_SYS_ADMIN: libc::c_ulong = 21;
const FATTR_MODE: u32 = 0x1;
const FATTR_ATIME: u32 = 0x10;
const FATTR_MTIME: u32 = 0x20;

/// `<dir>/share` served beside `<dir>/side` (where the host moves directories to) and
/// `<dir>/canary` (never inside).
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-mov-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for moved in MOVED {
            std::fs::create_dir_all(dir.join("share").join(moved).join("sub")).unwrap();
            std::fs::write(dir.join("share").join(moved).join("file"), b"inside").unwrap();
        }
        std::fs::create_dir_all(dir.join("side")).unwrap();
        std::fs::create_dir_all(dir.join("canary/sub")).unwrap();
        for (file, mode) in [("canary/file", 0o640), ("canary/sub/file", 0o600)] {
            std::fs::write(dir.join(file), b"host data").unwrap();
            std::fs::set_permissions(
                dir.join(file),
                std::os::unix::fs::PermissionsExt::from_mode(mode),
            )
            .unwrap();
            // Not every temporary file system keeps user xattrs; the snapshot notes what is.
            let _ = set_xattr(&dir.join(file), "user.canary", b"kept");
        }
        Layout { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Everything of one file the test checks.
#[derive(Debug, PartialEq)]
struct Kept {
    inode: Inode,
    xattrs: Vec<u8>,
    bytes: Option<Vec<u8>>,
}

/// The canary tree: every entry, by its path.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Kept> {
    let mut seen = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(path) = todo.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                todo.push(entry.unwrap().path());
            }
        }
        let kept = Kept {
            inode: Inode::of(&meta),
            xattrs: xattrs(&path),
            bytes: meta.is_file().then(|| std::fs::read(&path).unwrap()),
        };
        seen.insert(path, kept);
    }
    seen
}

/// Which wall the share is started with.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Wall {
    /// Root: the share's root is a mount of its own.
    Mount,
    /// Without `CAP_SYS_ADMIN`: the share's directory, the check alone.
    Directory,
}

fn serve(layout: &Layout, wall: Wall) -> Daemon {
    let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    if wall == Wall::Directory {
        // SAFETY: prctl in the child before exec; no allocation, no lock.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let spec = format!(
        "socket={},dir={},tag=t,mode=event",
        layout.path("fs.sock").display(),
        layout.path("share").display()
    );
    Serve::by(command)
        .fs(&spec)
        .env("RUST_LOG", "info")
        .log(&layout.path("vbmq.log"))
        .start()
}

/// The host: moves every directory of [`MOVED`] out to `side/` and back, over and over.
fn mover(layout: &Layout, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (share, side) = (layout.path("share"), layout.path("side"));
    std::thread::spawn(move || {
        let mut moves = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for name in MOVED {
                let (inside, outside) = (share.join(name), side.join(name));
                let (from, to) = match inside.exists() {
                    true => (inside, outside),
                    false => (outside, inside),
                };
                if std::fs::rename(from, to).is_ok() {
                    moves += 1;
                }
            }
            std::thread::yield_now();
        }
        moves
    })
}

/// The answer to a request: 0 or an errno.
fn errno(client: &mut FsClient, op: Opcode, node: u64, args: &[u8], names: &[&[u8]]) -> i32 {
    client
        .call(op, node, args, names, 4096)
        .map_or(libc::EIO, |(out, _)| -out.error)
}

/// Every change the test asks of directory `node`, and of its `file`.
fn change_through(client: &mut FsClient, node: u64) {
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    errno(
        client,
        Opcode::Create,
        node,
        fuse::args(&create),
        &[b"made"],
    );
    let mkdir = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    errno(
        client,
        Opcode::Mkdir,
        node,
        fuse::args(&mkdir),
        &[b"made-dir"],
    );
    let attr = SetattrIn {
        valid: FATTR_MODE | FATTR_ATIME | FATTR_MTIME,
        mode: 0o777,
        atime: 1,
        mtime: 1,
        ..SetattrIn::default()
    };
    errno(client, Opcode::Setattr, node, fuse::args(&attr), &[]);
    let args = setxattr_args("user.guest", b"guest");
    errno(client, Opcode::Setxattr, node, &args, &[]);
    if let Ok(file) = client.lookup(node, "file") {
        errno(client, Opcode::Setattr, file.nodeid, fuse::args(&attr), &[]);
        errno(client, Opcode::Setxattr, file.nodeid, &args, &[]);
    }
    errno(client, Opcode::Unlink, node, &[], &[b"made"]);
    errno(client, Opcode::Rmdir, node, &[], &[b"made-dir"]);
}

/// What a climb from a held directory met.
#[derive(PartialEq)]
enum Climb {
    /// Its first `..` got `ENOENT`: the directory was out.
    MetOutside,
    /// It found the canary (and tried to change it): an escape.
    ReachedCanary,
    /// Neither (it was inside).
    Inside,
}

/// Climbs `..` from `node` (at most four levels) and, from every directory reached, looks for
/// the canary and tries to change it: LOOKUP `..` answers `ENOENT` from a directory that left.
fn climb_to_canary(client: &mut FsClient, node: u64) -> Climb {
    let mut here = node;
    for level in 0..4 {
        let up = match client.lookup(here, "..") {
            Ok(up) => up.nodeid,
            Err(e) if level == 0 && e.raw_os_error() == Some(libc::ENOENT) => {
                return Climb::MetOutside;
            }
            Err(_) => return Climb::Inside,
        };
        if let Ok(canary) = client.lookup(up, "canary") {
            change_through(client, canary.nodeid);
            if let Ok(sub) = client.lookup(canary.nodeid, "sub") {
                change_through(client, sub.nodeid);
            }
            errno(client, Opcode::Unlink, canary.nodeid, &[], &[b"file"]);
            return Climb::ReachedCanary;
        }
        if up == here {
            break;
        }
        here = up;
    }
    Climb::Inside
}

/// How the client's rounds went.
struct Rounds {
    met_outside: usize,
    reached_canary: bool,
}

/// The client's rounds, racing the host's moves; they end at the first escape.
fn hammer(layout: &Layout) -> Rounds {
    let mut client = FsClient::connect(&layout.path("fs.sock")).unwrap();
    let mut met_outside = 0;
    let started = Instant::now();
    let mut round = 0;
    while (round < ROUNDS || met_outside < MET_OUTSIDE) && started.elapsed() < HARD_LIMIT {
        round += 1;
        let mut held = Vec::new();
        for name in MOVED {
            // Looked up while inside (the host may have it out now: then nothing this round).
            if let Ok(dir) = client.lookup(ROOT_ID, name) {
                held.push(dir.nodeid);
                if let Ok(sub) = client.lookup(dir.nodeid, "sub") {
                    held.push(sub.nodeid);
                }
            }
        }
        for (i, &node) in held.iter().enumerate() {
            change_through(&mut client, node);
            match climb_to_canary(&mut client, node) {
                Climb::MetOutside => met_outside += 1,
                Climb::ReachedCanary => {
                    return Rounds {
                        met_outside,
                        reached_canary: true,
                    };
                }
                Climb::Inside => {}
            }
            // RENAME between two held directories, either of which may be out by now.
            let other = held[(i + 1) % held.len()];
            let rename = RenameIn { newdir: other };
            errno(
                &mut client,
                Opcode::Rename,
                node,
                fuse::args(&rename),
                &[b"file", b"file"],
            );
            errno(
                &mut client,
                Opcode::Rename,
                other,
                fuse::args(&RenameIn { newdir: node }),
                &[b"file", b"file"],
            );
        }
    }
    Rounds {
        met_outside,
        reached_canary: false,
    }
}

fn case(name: &str, wall: Wall) {
    let layout = Layout::new(name);
    let before = snapshot(&layout.path("canary"));
    let mut daemon = serve(&layout, wall);
    let log = || std::fs::read_to_string(layout.path("vbmq.log")).unwrap_or_default();
    let expected = match wall {
        Wall::Mount => "served from a mount of its own",
        Wall::Directory => "served from its directory",
    };
    assert!(
        log().contains(expected),
        "not the wall asked for: {}",
        log()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let host = mover(&layout, stop.clone());
    let rounds = hammer(&layout);
    stop.store(true, Ordering::Relaxed);
    let moves = host.join().unwrap();
    assert!(daemon.alive(), "{}", log());
    assert_eq!(
        snapshot(&layout.path("canary")),
        before,
        "the canary tree changed ({moves} host moves)"
    );
    assert!(!rounds.reached_canary, "LOOKUP reached the canary");
    let met_outside = rounds.met_outside;
    assert!(
        met_outside >= MET_OUTSIDE,
        "only {met_outside} requests met a directory the host had moved out ({moves} moves): \
         the race was not run"
    );
}

#[test]
fn moves_during_requests_change_nothing_outside_a_share_on_its_own_mount() {
    case("mount", Wall::Mount);
}

#[test]
fn moves_during_requests_change_nothing_outside_a_share_served_from_its_directory() {
    case("directory", Wall::Directory);
}
