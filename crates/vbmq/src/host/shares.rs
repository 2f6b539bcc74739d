//! The shares the host serves beside its disks: listed, counted, reported and stopped as disks
//! are, under the same socket names; added at run time from the descriptors `vbmq ctl add-fs`
//! opened (a confined vbmq opens and binds nothing), beneath the `--fs-root` directories the
//! confinement opened to shares at start.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::running_share::{RunningShare, start_share};
use super::{DiskCounters, DiskInfo, Host, HostError, counters, lock};
use crate::config::{FsSpec, FsSpecError, SpecError, check_sockets};
pub use crate::devices::PassedShare;
use crate::devices::build_passed_share;
use crate::passed_fds::{check_directory, check_listening_socket, check_regular_file};
use crate::vhost_user::ShareServer;
use crate::virtio_fs::{RootWall, check_passed_mount, dev_ino, mount_readable, open_dir_at};
use crate::worker::online_cpus;

/// A directory beneath which `add-fs` may share (`--fs-root`), as it was at start.
#[derive(Clone, Debug)]
pub struct ShareRoot {
    /// As named at start.
    pub path: PathBuf,
    id: (u64, u64),
}

impl ShareRoot {
    /// The directory at `path` (before confinement).
    pub fn open(path: &Path) -> io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(path)?;
        Ok(ShareRoot {
            path: path.to_path_buf(),
            id: dev_ino(&file)?,
        })
    }
}

/// Whether `dir` is one of `roots` or lies beneath one: its real `..` chain is walked (`O_PATH`
/// opens, which the confinement allows anywhere) up to the process's `/`.
fn beneath_a_root(dir: &File, roots: &[ShareRoot]) -> io::Result<bool> {
    let mut id = dev_ino(dir)?;
    let mut parent_of: Option<File> = None;
    for _ in 0..4096 {
        if roots.iter().any(|root| root.id == id) {
            return Ok(true);
        }
        let parent = open_dir_at(parent_of.as_ref().unwrap_or(dir), c"..", libc::O_PATH)?;
        let parent_id = dev_ino(&parent)?;
        if parent_id == id {
            return Ok(false);
        }
        id = parent_id;
        parent_of = Some(parent);
    }
    Ok(false)
}

/// What a run-time share is served from: the detached mount `vbmq ctl add-fs` made of the
/// directory, once checked to be one whose root is that directory, else the directory itself
/// (the sender could not make a mount, or Landlock keeps this process out of it).
fn serve_from_mount(passed: &mut PassedShare, dir: &Path) -> io::Result<RootWall> {
    let Some(mount) = passed.mount.take() else {
        return Ok(RootWall::Directory);
    };
    check_directory(mount.as_fd())?;
    check_passed_mount(&passed.dir, &mount)?;
    if let Err(e) = mount_readable(&mount) {
        crate::limited!(
            info,
            "{}: the mount passed is not served ({e}): Landlock's rules, made at start, do \
             not reach a mount made after it",
            dir.display()
        );
        return Ok(RootWall::Directory);
    }
    passed.dir = mount;
    Ok(RootWall::Mount)
}

/// Why a run-time share's relative socket path is refused: the sender bound it in its own
/// working directory, and vbmq would remove the same name in its own.
pub const RELATIVE_SOCKET: &str = "must be an absolute path at run time (vbmq ctl and vbmq have working directories of their own)";

/// What a share's socket is called among the sockets no disk may take.
pub const SHARE: &str = "a share";

fn share_error(key: &str, reason: String) -> HostError {
    HostError::Share(FsSpecError(SpecError {
        key: key.into(),
        reason,
    }))
}

/// What a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A virtio-blk disk (`--disk`).
    Disk,
    /// A virtio-fs share (`--fs`).
    Fs,
}

impl DeviceKind {
    /// `disk` or `fs`, as the control protocol and the metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Disk => "disk",
            DeviceKind::Fs => "fs",
        }
    }
}

/// One share as `list` shows it.
#[derive(Clone, Debug)]
pub struct ShareInfo {
    /// The vhost-user socket: the share's name.
    pub socket: PathBuf,
    /// The `--fs` text it was given.
    pub spec: String,
    /// The tag the guest mounts.
    pub tag: String,
    /// The shared directory, as the spec names it.
    pub dir: PathBuf,
    /// Request queues (the high-priority queue comes on top).
    pub queues: usize,
    /// Whether every change is refused.
    pub readonly: bool,
    /// Whether a frontend is connected.
    pub connected: bool,
}

/// One device as `list` shows it.
#[derive(Clone, Debug)]
pub enum DeviceInfo {
    /// A disk.
    Disk(DiskInfo),
    /// A share.
    Share(ShareInfo),
}

fn share_info(share: &RunningShare) -> ShareInfo {
    ShareInfo {
        socket: share.spec.socket.clone(),
        spec: share.text.clone(),
        tag: share.spec.tag.clone(),
        dir: share.spec.dir.clone(),
        queues: share.spec.queues,
        readonly: share.spec.readonly,
        connected: share.connected(),
    }
}

impl Host {
    /// The directories beneath which `add-fs` may share from now on.
    pub fn set_share_roots(&self, roots: Vec<ShareRoot>) {
        *lock(&self.share_roots) = roots;
    }

    /// `add-fs`: parses `text` as `--fs` does and serves the share over `passed`, once each
    /// descriptor is what it should be and the directory lies beneath an `--fs-root`.
    pub fn add_passed_share(
        &self,
        text: &str,
        mut passed: PassedShare,
    ) -> Result<ShareInfo, HostError> {
        let spec = FsSpec::parse(text, &online_cpus())?;
        if !spec.socket.is_absolute() {
            return Err(share_error("socket", RELATIVE_SOCKET.into()));
        }
        let bad = |key: &'static str| move |e: io::Error| share_error(key, e.to_string());
        check_directory(passed.dir.as_fd()).map_err(bad("dir"))?;
        check_listening_socket(passed.listener.as_fd()).map_err(bad("socket"))?;
        if let Some(lock) = &passed.lock {
            check_regular_file(lock.as_fd()).map_err(bad("socket"))?;
        }
        passed
            .listener
            .set_nonblocking(false)
            .map_err(bad("socket"))?;
        let roots = lock(&self.share_roots).clone();
        if !beneath_a_root(&passed.dir, &roots).map_err(bad("dir"))? {
            let named: Vec<String> = roots.iter().map(|r| r.path.display().to_string()).collect();
            let reason = if named.is_empty() {
                "shares are added at run time only beneath an --fs-root given at start, and \
                 none was (see docs/operate.md)"
                    .to_string()
            } else {
                format!(
                    "{} is not beneath an --fs-root ({})",
                    spec.dir.display(),
                    named.join(", ")
                )
            };
            return Err(share_error("dir", reason));
        }
        // Beneath an --fs-root was checked on the directory: a mount of it hides its `..`.
        let wall = serve_from_mount(&mut passed, &spec.dir).map_err(bad("dir"))?;
        let mut shares = lock(&self.shares);
        // The disks' lock is held until the socket is reserved: no disk added meanwhile takes it.
        let disks = lock(&self.disks);
        {
            let disk_specs: Vec<_> = disks.iter().map(|r| r.spec.clone()).collect();
            let mut share_specs: Vec<FsSpec> = shares.iter().map(|s| s.spec.clone()).collect();
            share_specs.push(spec.clone());
            let others = lock(&self.other_sockets);
            // The shares' own entries there are checked through `share_specs`.
            let others: Vec<(&str, &Path)> = others
                .iter()
                .filter(|(what, _)| *what != SHARE)
                .map(|(what, path)| (*what, path.as_path()))
                .collect();
            check_sockets(&disk_specs, &share_specs, &others).map_err(FsSpecError)?;
        }
        let server = build_passed_share(&spec, passed)?;
        let share = start_share(server, spec.clone(), text.to_string())
            .map_err(|e| HostError::Start(format!("cannot start a share: {e}")))?;
        lock(&self.other_sockets).push((SHARE, spec.socket.clone()));
        drop(disks);
        let info = share_info(&share);
        shares.push(share);
        crate::limited!(
            info,
            "{}: share added: {}: {}",
            spec.socket.display(),
            spec.dir.display(),
            wall.describe()
        );
        Ok(info)
    }

    /// Serves a share, opened and bound already, on its own thread; `text` is its `--fs` value.
    pub fn start_share(
        &self,
        server: ShareServer,
        spec: FsSpec,
        text: String,
    ) -> Result<ShareInfo, HostError> {
        let mut shares = lock(&self.shares);
        let share = start_share(server, spec, text)
            .map_err(|e| HostError::Start(format!("cannot start a share: {e}")))?;
        let info = share_info(&share);
        shares.push(share);
        Ok(info)
    }

    /// `list`: every disk, then every share, each in the order added.
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let disks = self.list().into_iter().map(DeviceInfo::Disk);
        let shares = lock(&self.shares)
            .iter()
            .map(|share| DeviceInfo::Share(share_info(share)))
            .collect::<Vec<_>>();
        disks.chain(shares).collect()
    }

    /// `remove-fs`: disconnects the share's frontend, stops its socket, removes its files.
    pub fn remove_share(&self, socket: &Path) -> Result<(), HostError> {
        let share = {
            let mut shares = lock(&self.shares);
            let index = shares
                .iter()
                .position(|s| s.spec.socket == socket)
                .ok_or_else(|| HostError::NoSuchShare(socket.to_path_buf()))?;
            shares.remove(index)
        };
        lock(&self.other_sockets).retain(|(_, path)| path != socket);
        share.stop();
        crate::limited!(info, "{}: share removed", socket.display());
        Ok(())
    }

    /// The counters of every share, or of the one on `socket` (none if no share has it).
    pub(super) fn share_counters(&self, socket: Option<&Path>) -> Vec<DiskCounters> {
        lock(&self.shares)
            .iter()
            .filter(|share| socket.is_none_or(|s| share.spec.socket == s))
            .map(|share| DiskCounters {
                socket: share.spec.socket.clone(),
                kind: DeviceKind::Fs,
                queues: share.stats.iter().map(|q| counters(q)).collect(),
                engine: Vec::new(),
            })
            .collect()
    }

    /// One line per share for the log.
    pub(super) fn share_reports(&self) -> Vec<String> {
        lock(&self.shares)
            .iter()
            .map(RunningShare::report)
            .collect()
    }

    /// Stops every share (at exit).
    pub(super) fn stop_shares(&self) {
        let shares = std::mem::take(&mut *lock(&self.shares));
        for share in shares {
            share.stop();
        }
    }
}
