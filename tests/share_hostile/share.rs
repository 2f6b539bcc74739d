//! The share under attack: `vbmq serve --fs` over a scratch directory with a canary directory
//! beside it, and the checks every case ends with (vbmq alive, a known file reads right,
//! nothing outside the share changed, nor inside a read-only one).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::ROOT_ID;
use vm_memory::{Bytes, GuestAddress};

use crate::common::Daemon;
use crate::common::serve::serve_share;
use crate::common::xattr::{set_xattr, xattrs};

/// Bytes of the known file.
pub const FILE_LEN: usize = 256 << 10;

/// The known file's bytes.
pub fn pattern() -> Vec<u8> {
    (0..FILE_LEN)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 12) as u8)
        .collect()
}

/// A running share.
pub struct Share {
    daemon: Daemon,
    pub dir: PathBuf,
    readonly: bool,
    outside: Vec<Entry>,
    inside: Vec<Entry>,
}

impl Share {
    /// Serves `<scratch>/share` (`readonly=on` if asked); `<scratch>/outside` is the canary.
    pub fn start(name: &str, readonly: bool) -> Self {
        Self::launch(name, readonly, Command::new(env!("CARGO_BIN_EXE_vbmq")))
    }

    /// As [`Self::start`] on a kernel without Landlock (older ones, or built without it): only
    /// vbmq's own checks stand between the guest and the host's files.
    pub fn start_without_landlock(name: &str, readonly: bool) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
        // (prctl) on memory it owns.
        unsafe { command.pre_exec(crate::no_landlock::no_landlock) };
        let share = Self::launch(name, readonly, command);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !share.log().contains("landlock: not supported") {
            assert!(
                Instant::now() < deadline,
                "Landlock still on: {}",
                share.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        share
    }

    fn launch(name: &str, readonly: bool, command: Command) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-fsh-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("share/sub")).unwrap();
        std::fs::create_dir_all(dir.join("share/empty")).unwrap();
        std::fs::create_dir_all(dir.join("outside/dir")).unwrap();
        std::fs::write(dir.join("share/file"), pattern()).unwrap();
        std::fs::write(dir.join("share/sub/inner"), b"inner").unwrap();
        std::fs::write(dir.join("outside/secret"), b"not for guests").unwrap();
        symlink("../outside/secret", dir.join("share/link-out")).unwrap();
        // Where the file system has user xattrs, a file carries one (REMOVEXATTR's target).
        let _ = set_xattr(&dir.join("share/file"), "user.keep", b"kept");
        let _ = set_xattr(&dir.join("outside/secret"), "user.keep", b"kept");
        let extra = format!(",readonly={}", if readonly { "on" } else { "off" });
        let outside = snapshot(&dir.join("outside"));
        let inside = snapshot(&dir.join("share"));
        let daemon = serve_share(command, &dir, &dir.join("share"), &extra);
        Share {
            daemon,
            outside,
            inside,
            dir,
            readonly,
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("fs.sock")
    }

    pub fn client(&self) -> FsClient {
        FsClient::connect(&self.socket()).unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vbmq.log")).unwrap_or_default()
    }

    pub fn alive(&mut self) -> bool {
        self.daemon.alive()
    }

    /// The checks after a case, with `client` (its session may be the attacked one).
    pub fn check(&mut self, case: &str, client: &mut FsClient) {
        assert!(self.alive(), "{case}: vbmq died: {}", self.log());
        reads_the_known_file(client, case);
        self.unchanged(case);
    }

    /// As [`Self::check`] from a new connection (the attacked one may have been closed; a
    /// share serves one frontend at a time, so it must be gone).
    pub fn check_anew(&mut self, case: &str) {
        assert!(self.alive(), "{case}: vbmq died: {}", self.log());
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut client = loop {
            match FsClient::connect(&self.socket()) {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("{case}: cannot connect again: {e}; {}", self.log()),
            }
        };
        self.check(case, &mut client);
    }

    /// Nothing outside the share changed, nor inside a read-only one.
    pub fn unchanged(&self, case: &str) {
        let outside = snapshot(&self.dir.join("outside"));
        assert!(
            outside == self.outside,
            "{case}: outside the share changed: {:?}",
            diff(&self.outside, &outside)
        );
        if self.readonly {
            let inside = snapshot(&self.dir.join("share"));
            assert!(
                inside == self.inside,
                "{case}: the read-only share changed: {:?}",
                diff(&self.inside, &inside)
            );
        }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = self.daemon.child.kill();
        let _ = self.daemon.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// LOOKUP, OPEN, READs and RELEASE of the known file: its bytes are the host's.
pub fn reads_the_known_file(client: &mut FsClient, case: &str) {
    let entry = client
        .lookup(ROOT_ID, "file")
        .unwrap_or_else(|e| panic!("{case}: lookup of the known file: {e}"));
    assert_eq!(entry.attr.size, FILE_LEN as u64, "{case}");
    let fh = client
        .open(entry.nodeid, libc::O_RDONLY as u32)
        .unwrap_or_else(|e| panic!("{case}: open of the known file: {e}"));
    let expected = pattern();
    for offset in [0usize, 60 << 10, FILE_LEN - 4096] {
        let request = client.read_request(entry.nodeid, fh, offset as u64, 4096);
        client.submit(0, &request, 16 + 4096).unwrap();
        client.kick().unwrap();
        let (_, written) = client
            .wait(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("{case}: no answer to a READ"));
        assert_eq!(written, 16 + 4096, "{case}: READ at {offset}");
        let (_, reply_at) = FsClient::slot_addrs(0);
        let mut data = vec![0u8; 4096];
        client
            .memory()
            .read_slice(&mut data, GuestAddress(reply_at + 16))
            .unwrap();
        assert!(
            data == expected[offset..offset + 4096],
            "{case}: READ at {offset}"
        );
    }
    client.release(entry.nodeid, fh).unwrap();
}

/// What a guest could change about one path: kind, mode, owner, size, times (not the access
/// time), contents or link target, and user xattrs.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    path: PathBuf,
    mode: u32,
    owner: (u32, u32),
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    contents: Vec<u8>,
    xattrs: Vec<u8>,
}

/// Every path under `dir`, `dir` itself included, sorted.
pub fn snapshot(dir: &Path) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let contents = if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
            Vec::new()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path)
                .map(|t| t.as_os_str().as_bytes().to_vec())
                .unwrap_or_default()
        } else {
            std::fs::read(&path).unwrap_or_default()
        };
        out.push(Entry {
            xattrs: xattrs(&path),
            path,
            mode: meta.mode(),
            owner: (meta.uid(), meta.gid()),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            contents,
        });
    }
    out.sort();
    out
}

fn diff<'a>(before: &'a [Entry], after: &'a [Entry]) -> Vec<&'a Entry> {
    after
        .iter()
        .filter(|e| !before.contains(e))
        .chain(before.iter().filter(|e| !after.contains(e)))
        .collect()
}
