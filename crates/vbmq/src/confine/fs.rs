//! Landlock: the filesystem the confined process still sees.

use std::os::fd::AsFd;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, RestrictSelfAttr, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::{ConfineError, ConfineOptions};

/// The newest Landlock ABI vbmq knows; older kernels get the subset they support.
const ABI_TARGET: ABI = ABI::V8;

/// How much of the Landlock ruleset the kernel enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilesystemStatus {
    /// Every rule, on every thread.
    Full,
    /// Every thread, but an older ABI: some access kinds stay unrestricted.
    Partial,
    /// The kernel lacks Landlock TSYNC: only the calling thread and threads it starts later.
    CallingThreadOnly,
    /// No Landlock on this kernel.
    Unsupported,
}

/// Denies every filesystem access except the disks (read, and write when writable) and file
/// removal in the sockets' directories; denies TCP, abstract sockets and signals to
/// processes outside the sandbox where the kernel can. With an RBD disk: read access to the
/// Ceph configuration and keyring, and TCP connections to any port (monitors and OSDs listen
/// on ports the cluster chooses, and move); binding TCP ports stays denied.
pub(super) fn restrict(opts: &ConfineOptions) -> Result<FilesystemStatus, ConfineError> {
    let mut net = AccessNet::from_all(ABI_TARGET);
    if opts.ceph.is_some() {
        net.remove(AccessNet::ConnectTcp);
    }
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_TARGET))?
        .handle_access(net)?
        .scope(Scope::from_all(ABI_TARGET))?
        .create()?;
    for disk in &opts.disks {
        let mut access: BitFlags<AccessFs> = AccessFs::ReadFile.into();
        if disk.writable {
            access |= AccessFs::WriteFile;
        }
        ruleset = ruleset.add_rule(PathBeneath::new(open_path(&disk.path)?, access))?;
    }
    for share in &opts.shares {
        let access = if share.writable {
            // No device nodes made there, and no device ioctls (SECURITY.md).
            let denied =
                AccessFs::Execute | AccessFs::MakeBlock | AccessFs::MakeChar | AccessFs::IoctlDev;
            AccessFs::from_all(ABI_TARGET) & !denied
        } else {
            AccessFs::ReadFile | AccessFs::ReadDir
        };
        ruleset = match &share.held {
            Some(dir) => ruleset.add_rule(PathBeneath::new(dir.as_fd(), access))?,
            None => ruleset.add_rule(PathBeneath::new(open_path(&share.path)?, access))?,
        };
    }
    for dir in &opts.read_dirs {
        let access = AccessFs::ReadFile;
        ruleset = ruleset.add_rule(PathBeneath::new(open_path(dir)?, access))?;
    }
    for file in opts.ceph.iter().flat_map(|ceph| &ceph.files) {
        let access = AccessFs::ReadFile;
        ruleset = ruleset.add_rule(PathBeneath::new(open_path(file)?, access))?;
    }
    for socket in &opts.sockets {
        let dir = match socket.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => std::path::Path::new("."),
        };
        // The listening sockets are bound before confinement and kept across connections:
        // no socket is made after it. Removal stays, for the socket and lock files at exit;
        // Landlock grants it per directory only, so a dedicated socket directory
        // (`/run/vbmq`) keeps it to vbmq's own files.
        let access = AccessFs::RemoveFile;
        ruleset = ruleset.add_rule(PathBeneath::new(open_path(dir)?, access))?;
    }
    for dir in &opts.run_time_socket_dirs {
        // A run-time disk's socket (made under a temporary name, renamed) and lock file.
        let access =
            AccessFs::MakeSock | AccessFs::MakeReg | AccessFs::WriteFile | AccessFs::RemoveFile;
        ruleset = ruleset.add_rule(PathBeneath::new(open_path(dir)?, access))?;
    }
    let status = ruleset.all_threads(true)?.restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::NotEnforced => FilesystemStatus::Unsupported,
        _ if !status.all_threads => FilesystemStatus::CallingThreadOnly,
        RulesetStatus::PartiallyEnforced => FilesystemStatus::Partial,
        RulesetStatus::FullyEnforced => FilesystemStatus::Full,
    })
}

fn open_path(path: &std::path::Path) -> Result<PathFd, ConfineError> {
    PathFd::new(path).map_err(|source| ConfineError::LandlockPath {
        path: path.to_path_buf(),
        source,
    })
}
