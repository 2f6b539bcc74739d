//! A guest that holds a share's directories while the host moves them out, and a guest that
//! asks for host privileges (device nodes, set-ID bits, file capabilities, trusted xattrs, huge
//! directory reads): `vbmq serve --fs` driven through its real socket by the user-space
//! virtio-fs client. After every case nothing outside the share has changed (a canary file's
//! mode, owner, times, xattrs and bytes; the outside directory's names) and the share still
//! serves a known file.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::common::Daemon;
use crate::common::fs::{Inode, names, setxattr_args};
use crate::common::serve::serve_share;
use crate::common::xattr::{get_xattr, set_xattr, xattr_names};

use vbmq_driver::fuse::{
    self, AttrOut, CreateIn, EntryOut, FATTR_ATIME, FATTR_GID, FATTR_MODE, FATTR_MTIME, FATTR_UID,
    GetxattrIn, MkdirIn, MknodIn, Opcode, OpenIn, OpenOut, OutHeader, ROOT_ID, ReadIn, SetattrIn,
};
use vbmq_driver::{Buffer, FsClient};
use vm_memory::{ByteValued, Bytes, GuestAddress};

const KNOWN: &[u8] = b"the share's own bytes\n";

struct Share {
    daemon: Daemon,
    dir: PathBuf,
}

impl Share {
    /// `<dir>/share` served (with `extra` options), beside `<dir>/outside` and its canary.
    fn start(name: &str, extra: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-esc-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("share/a/b")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(dir.join("share/file"), KNOWN).unwrap();
        let canary = dir.join("outside/canary");
        std::fs::write(&canary, b"host data").unwrap();
        std::fs::set_permissions(&canary, std::os::unix::fs::PermissionsExt::from_mode(0o640))
            .unwrap();
        // Not every temporary file system keeps user xattrs; the snapshot notes what is there.
        let _ = set_xattr(&canary, "user.canary", b"kept");
        let command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        let daemon = serve_share(command, &dir, &dir.join("share"), extra);
        Share { daemon, dir }
    }

    fn client(&self) -> FsClient {
        FsClient::connect(&self.dir.join("fs.sock")).unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vbmq.log")).unwrap_or_default()
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Still running, and a known file reads right through a fresh lookup.
    fn still_serves(&mut self, client: &mut FsClient) {
        assert!(self.daemon.alive(), "{}", self.log());
        let entry = client
            .lookup(ROOT_ID, "file")
            .expect("lookup of a known file");
        let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
        let read = ReadIn {
            fh,
            size: 4096,
            ..ReadIn::default()
        };
        let (out, body) = client
            .call(Opcode::Read, entry.nodeid, fuse::args(&read), &[], 8192)
            .unwrap();
        assert_eq!(out.error, 0);
        assert_eq!(body, KNOWN);
        client.release(entry.nodeid, fh).unwrap();
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = self.daemon.child.kill();
        let _ = self.daemon.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Everything the tests check did not change outside the share.
#[derive(Debug, PartialEq)]
struct Outside {
    inode: Inode,
    xattrs: Vec<u8>,
    bytes: Vec<u8>,
    names: Vec<String>,
    parent_names: Vec<String>,
}

fn outside(share: &Share) -> Outside {
    let canary = share.path("outside/canary");
    let meta = std::fs::symlink_metadata(&canary).unwrap();
    Outside {
        inode: Inode::of(&meta),
        xattrs: xattr_names(&canary),
        bytes: std::fs::read(&canary).unwrap(),
        names: names(&share.path("outside")),
        parent_names: names(&share.dir),
    }
}

/// OPENDIR of `node`: its handle.
fn opendir(client: &mut FsClient, node: u64) -> std::io::Result<u64> {
    let open = OpenIn {
        flags: (libc::O_RDONLY | libc::O_DIRECTORY) as u32,
        fuse_flags: 0,
    };
    let (out, body) = client.call(Opcode::Opendir, node, fuse::args(&open), &[], 4096)?;
    if out.error != 0 {
        return Err(std::io::Error::from_raw_os_error(-out.error));
    }
    Ok(OpenOut::from_slice(&body[..size_of::<OpenOut>()])
        .unwrap()
        .fh)
}

fn entry(body: &[u8]) -> EntryOut {
    *EntryOut::from_slice(&body[..size_of::<EntryOut>()]).unwrap()
}

/// Every change a guest can ask of node `node` (and of `name` in it, were it a directory);
/// returns the errors, one per request.
fn try_every_change(client: &mut FsClient, node: u64) -> Vec<i32> {
    let mut errors = Vec::new();
    let mut call = |opcode, args: &[u8], names: &[&[u8]]| {
        let (out, _) = client.call(opcode, node, args, names, 4096).unwrap();
        errors.push(-out.error);
    };
    let attr = SetattrIn {
        valid: FATTR_MODE | FATTR_UID | FATTR_GID | FATTR_ATIME | FATTR_MTIME,
        mode: 0o4777,
        uid: 65534,
        gid: 65534,
        atime: 1,
        mtime: 1,
        ..SetattrIn::default()
    };
    call(Opcode::Setattr, fuse::args(&attr), &[]);
    call(Opcode::Setxattr, &setxattr_args("user.evil", b"evil"), &[]);
    call(Opcode::Removexattr, &[], &[b"user.canary"]);
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    call(Opcode::Create, fuse::args(&create), &[b"evil"]);
    let mkdir = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    call(Opcode::Mkdir, fuse::args(&mkdir), &[b"evil-dir"]);
    call(Opcode::Symlink, &[], &[b"evil-link", b"/etc/shadow"]);
    call(Opcode::Unlink, &[], &[b"canary"]);
    call(
        Opcode::Open,
        fuse::args(&OpenIn {
            flags: (libc::O_RDWR | libc::O_TRUNC) as u32,
            fuse_flags: 0,
        }),
        &[],
    );
    errors
}

/// LOOKUP ".." from `node` as long as it answers: the nodes reached.
fn climb(client: &mut FsClient, mut node: u64) -> Vec<(u64, u64)> {
    let mut reached = Vec::new();
    for _ in 0..64 {
        let (out, body) = client
            .call(Opcode::Lookup, node, &[], &[b".."], 4096)
            .unwrap();
        if out.error != 0 {
            break;
        }
        let found = entry(&body);
        reached.push((found.nodeid, found.attr.ino));
        if found.nodeid == node {
            break;
        }
        node = found.nodeid;
    }
    reached
}

/// A directory the client holds is moved out by the host: `..` from it, and every change
/// through it or through anything reached from it, leave the host's files alone.
/// `refused`: what every change through a moved-out node gets (the share's own answer, not
/// Landlock's, which has no right for most of them).
fn moved_out_directory_case(name: &str, extra: &str, refused: i32) {
    let mut share = Share::start(name, extra);
    let mut client = share.client();
    let a = client.lookup(ROOT_ID, "a").unwrap().nodeid;
    let b = client.lookup(a, "b").unwrap().nodeid;
    let listing = opendir(&mut client, a).unwrap();
    std::fs::rename(share.path("share/a"), share.path("outside/moved")).unwrap();
    // What the host puts in the directory now is not the share's.
    std::fs::write(share.path("outside/moved/host-only"), b"").unwrap();
    let before = outside(&share);
    let root_ino = std::fs::metadata(share.path("share")).unwrap().ino();

    let held_inos = [
        std::fs::metadata(share.path("outside/moved"))
            .unwrap()
            .ino(),
        std::fs::metadata(share.path("outside/moved/b"))
            .unwrap()
            .ino(),
    ];
    for (held, held_ino) in [a, b].into_iter().zip(held_inos) {
        let reached = climb(&mut client, held);
        // The directory left the share: `..` has nowhere inside to go.
        assert!(
            reached.is_empty(),
            "LOOKUP .. from a moved-out node reached {reached:?} (share root ino {root_ino})"
        );
        for errno in try_every_change(&mut client, held) {
            assert_eq!(errno, refused, "a change through a moved-out node");
        }
        // A held node answers for itself, as virtiofsd's do: it reaches no other file.
        let (out, body) = client
            .call(
                Opcode::Getattr,
                held,
                fuse::args(&fuse::GetattrIn::default()),
                &[],
                4096,
            )
            .unwrap();
        assert_eq!(out.error, 0, "GETATTR of a held node that left the share");
        let attr = AttrOut::from_slice(&body[..size_of::<AttrOut>()]).unwrap();
        assert_eq!(attr.attr.ino, held_ino, "GETATTR answered another file");
        let (out, _) = client
            .call(Opcode::Lookup, held, &[], &[b"b"], 4096)
            .unwrap();
        assert_eq!(
            -out.error,
            libc::ENOENT,
            "LOOKUP under a node that left the share"
        );
    }
    // A listing opened before the move reads nothing more; none opens after it.
    let read = ReadIn {
        fh: listing,
        size: 4096,
        ..ReadIn::default()
    };
    let (out, body) = client
        .call(Opcode::Readdir, a, fuse::args(&read), &[], 8192)
        .unwrap();
    assert_eq!(
        -out.error,
        libc::ENOENT,
        "READDIR of a moved-out directory: {body:?}"
    );
    assert_eq!(
        opendir(&mut client, a).err().and_then(|e| e.raw_os_error()),
        Some(libc::ENOENT)
    );
    // The old code's route: `..` to the outside directory (and no further: the old code would
    // change the host's `/`), and the canary in it.
    let outside_ino = std::fs::metadata(share.path("outside")).unwrap().ino();
    let reached = climb(&mut client, a);
    for &(node, _) in reached.iter().filter(|(_, ino)| *ino == outside_ino) {
        try_every_change(&mut client, node);
        if let Ok(canary) = client.lookup(node, "canary") {
            try_every_change(&mut client, canary.nodeid);
        }
    }
    assert_eq!(
        outside(&share),
        before,
        "something outside the share changed"
    );
    assert_eq!(names(&share.path("outside/moved")), ["b", "host-only"]);

    // The root's `..` is the root.
    let up = client.lookup(ROOT_ID, "..").unwrap();
    assert_eq!(up.nodeid, ROOT_ID);
    assert_eq!(up.attr.ino, root_ino);
    // Moved back, the held node serves again.
    std::fs::rename(share.path("outside/moved"), share.path("share/a")).unwrap();
    assert_eq!(client.lookup(a, "..").unwrap().nodeid, ROOT_ID);
    assert_eq!(client.lookup(b, "..").unwrap().nodeid, a);
    share.still_serves(&mut client);
}

#[test]
fn a_directory_moved_out_of_a_writable_share_reaches_nothing_outside() {
    moved_out_directory_case("writable", "", libc::ENOENT);
}

#[test]
fn a_directory_moved_out_of_a_readonly_share_shows_nothing_outside() {
    moved_out_directory_case("readonly", ",readonly=on", libc::EROFS);
}

/// A file the client holds is moved out by the host: it can no longer be changed.
#[test]
fn a_file_moved_out_of_the_share_cannot_be_changed() {
    let mut share = Share::start("file", "");
    std::fs::write(share.path("share/held"), b"held").unwrap();
    let mut client = share.client();
    let held = client.lookup(ROOT_ID, "held").unwrap().nodeid;
    std::fs::rename(share.path("share/held"), share.path("outside/held")).unwrap();
    let meta = std::fs::metadata(share.path("outside/held")).unwrap();
    for errno in try_every_change(&mut client, held) {
        assert_eq!(errno, libc::ENOENT, "a change through a moved-out file");
    }
    let after = std::fs::metadata(share.path("outside/held")).unwrap();
    assert_eq!(
        (after.mode(), after.uid(), after.mtime(), after.len()),
        (meta.mode(), meta.uid(), meta.mtime(), meta.len())
    );
    assert_eq!(xattr_names(&share.path("outside/held")), b"");
    share.still_serves(&mut client);
}

/// Not an escape (the old code passes too): a file the host renames inside the share, then
/// unlinks, while the client holds it stays the client's to use, as on any file system.
#[test]
fn a_file_renamed_then_unlinked_under_its_holder_still_serves_it() {
    let mut share = Share::start("unlinked", "");
    std::fs::create_dir(share.path("share/d")).unwrap();
    std::fs::write(share.path("share/d/tmp"), b"scratch").unwrap();
    let mut client = share.client();
    let d = client.lookup(ROOT_ID, "d").unwrap().nodeid;
    let tmp = client.lookup(d, "tmp").unwrap().nodeid;
    let fh = client.open(tmp, libc::O_RDWR as u32).unwrap();
    // Renamed by the host inside the share: still inside.
    std::fs::rename(share.path("share/d/tmp"), share.path("share/tmp2")).unwrap();
    assert_eq!(client.getattr(tmp).unwrap().attr.size, 7);
    std::fs::remove_file(share.path("share/tmp2")).unwrap();
    assert_eq!(client.getattr(tmp).unwrap().attr.size, 7);
    let truncate = SetattrIn {
        valid: 0x8 | 0x40, // FATTR_SIZE | FATTR_FH
        fh,
        size: 3,
        ..SetattrIn::default()
    };
    let (out, _) = client
        .call(Opcode::Setattr, tmp, fuse::args(&truncate), &[], 4096)
        .unwrap();
    assert_eq!(out.error, 0);
    assert_eq!(client.getattr(tmp).unwrap().attr.size, 3);
    client.release(tmp, fh).unwrap();
    share.still_serves(&mut client);
}

fn mknod(client: &mut FsClient, name: &[u8], mode: u32, rdev: u32) -> i32 {
    let args = MknodIn {
        mode,
        rdev,
        umask: 0,
        padding: 0,
    };
    let (out, _) = client
        .call(Opcode::Mknod, ROOT_ID, fuse::args(&args), &[name], 4096)
        .unwrap();
    -out.error
}

fn setxattr(client: &mut FsClient, node: u64, name: &str, value: &[u8]) -> OutHeader {
    let args = setxattr_args(name, value);
    client
        .call(Opcode::Setxattr, node, &args, &[], 4096)
        .unwrap()
        .0
}

#[test]
fn device_nodes_set_id_bits_and_privileged_xattrs_are_refused() {
    let mut share = Share::start("privileges", "");
    let mut client = share.client();
    let before = outside(&share);

    // Block and character devices: refused, nothing made.
    let loop0 = 7 << 8;
    let null = (1 << 8) | 3;
    assert_eq!(
        mknod(&mut client, b"blk", libc::S_IFBLK | 0o666, loop0),
        libc::EPERM
    );
    assert_eq!(
        mknod(&mut client, b"chr", libc::S_IFCHR | 0o666, null),
        libc::EPERM
    );
    assert!(!share.path("share/blk").exists() && !share.path("share/chr").exists());
    // And the process could not make one: CAP_MKNOD is gone from every set of every thread
    // (as root; a process without CAP_SETPCAP keeps its bounding set).
    // SAFETY: geteuid has no arguments and cannot fail. (27: CAP_MKNOD.)
    if unsafe { libc::geteuid() } == 0 {
        let tasks = format!("/proc/{}/task", share.daemon.child.id());
        for task in std::fs::read_dir(tasks).unwrap() {
            let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
            for line in status.lines().filter(|l| l.starts_with("Cap")) {
                let (set, bits) = line.split_once(':').unwrap();
                let bits = u64::from_str_radix(bits.trim(), 16).unwrap();
                assert_eq!(bits & (1 << 27), 0, "CAP_MKNOD in {set}");
            }
        }
    }
    // A FIFO is no privilege; a set-user-ID node loses the bit.
    assert_eq!(mknod(&mut client, b"fifo", libc::S_IFIFO | 0o4644, 0), 0);
    let fifo = std::fs::symlink_metadata(share.path("share/fifo")).unwrap();
    assert_eq!(fifo.mode() & 0o7777, 0o644);

    // CREATE and SETATTR: set-user-ID and set-group-ID bits stripped.
    let (out, body) = crate::common::fs::create(&mut client, "suid", libc::S_IFREG | 0o6755);
    assert_eq!(out.error, 0);
    let created = entry(&body).nodeid;
    let mode = std::fs::metadata(share.path("share/suid")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o755, "CREATE kept a set-ID bit: {mode:o}");
    let file = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let attr = SetattrIn {
        valid: FATTR_MODE,
        mode: libc::S_IFREG | 0o6755,
        ..SetattrIn::default()
    };
    for node in [created, file] {
        let (out, _) = client
            .call(Opcode::Setattr, node, fuse::args(&attr), &[], 4096)
            .unwrap();
        assert_eq!(out.error, 0);
    }
    for name in ["share/suid", "share/file"] {
        let mode = std::fs::metadata(share.path(name)).unwrap().mode();
        assert_eq!(
            mode & 0o7777,
            0o755,
            "chmod u+s,g+s kept a set-ID bit on {name}"
        );
    }
    // MKNOD of a regular file too.
    assert_eq!(
        mknod(&mut client, b"suid-node", libc::S_IFREG | 0o4755, 0),
        0
    );
    let mode = std::fs::metadata(share.path("share/suid-node"))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);

    // File capabilities and trusted xattrs: refused; a host's trusted xattr reads as absent.
    // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, CAP_SETUID permitted.
    let mut cap = Vec::new();
    for word in [0x0200_0001u32, 1 << 7, 0, 0, 0] {
        cap.extend_from_slice(&word.to_le_bytes());
    }
    for (name, value) in [
        ("security.capability", &cap[..]),
        ("trusted.evil", b"v"),
        ("security.evil", b"v"),
    ] {
        let out = setxattr(&mut client, file, name, value);
        assert_eq!(-out.error, libc::EPERM, "SETXATTR {name}");
        assert_eq!(
            get_xattr(&share.path("share/file"), name),
            None,
            "{name} set"
        );
    }
    if set_xattr(&share.path("share/file"), "trusted.host", b"host only").is_ok() {
        let args = GetxattrIn {
            size: 4096,
            padding: 0,
        };
        let (out, _) = client
            .call(
                Opcode::Getxattr,
                file,
                fuse::args(&args),
                &[b"trusted.host"],
                8192,
            )
            .unwrap();
        assert_eq!(
            -out.error,
            libc::ENODATA,
            "a host's trusted xattr was shown"
        );
        let (out, _) = client
            .call(Opcode::Removexattr, file, &[], &[b"trusted.host"], 4096)
            .unwrap();
        assert_eq!(-out.error, libc::EPERM);
        assert!(get_xattr(&share.path("share/file"), "trusted.host").is_some());
    }
    // A user xattr still works.
    assert_eq!(setxattr(&mut client, file, "user.ok", b"1").error, 0);

    assert_eq!(outside(&share), before);
    // The setattr above made `file` 0755; its bytes are the same.
    share.still_serves(&mut client);
}

#[test]
fn a_huge_readdir_size_gets_at_most_one_mebibyte() {
    let mut share = Share::start("readdir", "");
    // About 2 MiB of directory entries.
    let long = "n".repeat(200);
    for i in 0..9000 {
        std::fs::File::create(share.path(&format!("share/{long}{i:05}"))).unwrap();
    }
    let mut client = share.client();
    let fh = opendir(&mut client, ROOT_ID).unwrap();
    const ROOM: u32 = 16 << 20;
    let read = ReadIn {
        fh,
        size: ROOM,
        ..ReadIn::default()
    };
    let unique = client.next_unique();
    let request = fuse::request(Opcode::Readdir, unique, ROOT_ID, fuse::args(&read), &[]);
    let (req_at, _) = FsClient::slot_addrs(0);
    let reply_at = 32 << 20;
    client
        .memory()
        .write_slice(&request, GuestAddress(req_at))
        .unwrap();
    client.submit_buffers(
        0,
        &[
            Buffer::readable(req_at, request.len() as u32),
            Buffer::writable(reply_at, ROOM + 16),
        ],
    );
    client.kick().unwrap();
    let (_, written) = client.wait(Duration::from_secs(10)).expect("a reply");
    let header: OutHeader = client.memory().read_obj(GuestAddress(reply_at)).unwrap();
    assert_eq!(header.error, 0);
    assert!(written > 64 << 10, "READDIR gave only {written} bytes");
    assert!(
        written <= (1 << 20) + 16,
        "READDIR gave {written} bytes: the guest's size was not capped"
    );
    share.still_serves(&mut client);
}
