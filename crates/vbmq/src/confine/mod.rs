//! Confinement applied by `vbmq serve` once its disks are open and its sockets bound.
//!
//! A guest or frontend that finds a bug in vbmq should gain as little as possible: Landlock
//! limits the filesystem to the disks and sockets named on the command line, and a seccomp filter
//! limits the process to the system calls vbmq makes. Both are applied to every thread.

mod caps;
mod fs;
mod sigsys;
mod syscalls;
mod uring;
mod user_namespace;

use std::path::PathBuf;
use std::sync::Arc;

pub use fs::FilesystemStatus;
pub use uring::{RingPolicy, URING_OPCODES, restrict_ring};
pub use user_namespace::{IdRange, UserNamespace};

/// Exit status of a process killed for a forbidden system call (128 + SIGSYS, as a shell shows it).
pub const SECCOMP_EXIT_STATUS: i32 = 128 + libc::SIGSYS;

/// A disk file the confined process keeps using.
#[derive(Clone, Debug)]
pub struct DiskAccess {
    /// The backing file (regular file or block device).
    pub path: PathBuf,
    /// Whether the disk is writable (`readonly=on` disks get read access only).
    pub writable: bool,
    /// The file or directory as the process already holds it (a share's root): the rule is
    /// made on it, and `path`, which may lead elsewhere by now, only names it.
    pub held: Option<Arc<std::fs::File>>,
}

/// What an RBD disk's librados and librbd keep needing once serving.
#[derive(Clone, Debug, Default)]
pub struct CephAccess {
    /// The Ceph configuration and keyring files: read access only.
    pub files: Vec<PathBuf>,
}

/// What the confined process may still reach.
#[derive(Clone, Debug, Default)]
pub struct ConfineOptions {
    /// Backing files of the file-backed disks (`null=` and `mem=` disks have none).
    pub disks: Vec<DiskAccess>,
    /// Directories shared with guests (`--fs`): everything beneath them but device nodes, or
    /// reading only when the share is read-only. With any, `CAP_MKNOD` is dropped too.
    pub shares: Vec<DiskAccess>,
    /// vhost-user listening socket paths; their directories keep the right to create and remove
    /// a socket so the listener can be bound again.
    pub sockets: Vec<PathBuf>,
    /// Directories where disks added at run time bind their sockets and lock files (the
    /// control socket's): granted socket and file creation, and the calls that bind.
    pub run_time_socket_dirs: Vec<PathBuf>,
    /// Present when an RBD disk is served: TCP connections to the cluster, librados' reads of
    /// its configuration and keyring, and the system calls of librados' threads.
    pub ceph: Option<CephAccess>,
    /// Directories whose files stay readable: the configuration file's, read again on reload.
    pub read_dirs: Vec<PathBuf>,
    /// A disk registers guest memory with its rings after setup (`fixed-buffers=on`):
    /// `io_uring_register` stays allowed. Its rings accept only the buffer registrations; the
    /// spare rings of run-time disks (`ring_pool`) only their file slots' update.
    pub uring_register: bool,
    /// A thin disk's base is an NBD export, or may be added as one (a control socket): its
    /// fetcher connects to the export's Unix socket after confinement too (SECURITY.md).
    pub nbd_client: bool,
    /// Install the seccomp filter (turned off only for debugging, e.g. under strace or gdb).
    pub seccomp: bool,
}

/// Why confinement could not be applied. vbmq must not serve unconfined when asked otherwise.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// Building or enforcing the Landlock ruleset failed.
    #[error("landlock: {0}")]
    Landlock(#[from] ::landlock::RulesetError),
    /// A path named in the options could not be opened for a rule.
    #[error("landlock: cannot open {path}: {source}")]
    LandlockPath {
        /// The disk or socket path.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: ::landlock::PathFdError,
    },
    /// The seccomp filter could not be compiled.
    #[error("seccomp filter: {0}")]
    SeccompBuild(#[from] seccompiler::BackendError),
    /// The seccomp filter could not be installed.
    #[error("seccomp: {0}")]
    SeccompInstall(#[from] seccompiler::Error),
    /// The SIGSYS reporter could not be installed.
    #[error("installing the SIGSYS handler: {0}")]
    Sigsys(#[source] std::io::Error),
}

/// What was enforced, for the log line at startup and for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confinement {
    /// How far Landlock restricts the filesystem on this kernel.
    pub filesystem: FilesystemStatus,
    /// Whether the seccomp filter is installed.
    pub seccomp: bool,
}

/// Restricts the whole process to what `opts` names. Call it once, after setup: disks opened,
/// sockets bound. Landlock is best effort (kernels without it are logged and served); a seccomp
/// failure is an error because the operator asked for it.
pub fn confine(opts: &ConfineOptions) -> Result<Confinement, ConfineError> {
    if !opts.shares.is_empty() {
        caps::drop_mknod();
    }
    let filesystem = fs::restrict(opts)?;
    match filesystem {
        FilesystemStatus::Full => tracing::info!("landlock: filesystem confined"),
        FilesystemStatus::Partial => {
            tracing::warn!("landlock: kernel supports only part of the ruleset")
        }
        // `vbmq serve` confines itself before it starts any thread, so every thread is covered.
        FilesystemStatus::CallingThreadOnly => {
            tracing::info!("landlock: filesystem confined for this thread and those it starts")
        }
        FilesystemStatus::Unsupported => {
            tracing::warn!("landlock: not supported by this kernel, filesystem not confined")
        }
    }
    if opts.seccomp {
        sigsys::install().map_err(ConfineError::Sigsys)?;
        let allowlist = syscalls::filter(
            opts.ceph.is_some(),
            !opts.run_time_socket_dirs.is_empty(),
            !opts.shares.is_empty(),
            opts.uring_register,
            opts.nbd_client,
        )?;
        let clone3 = syscalls::clone3_fallback()?;
        // The allowlist forbids seccomp(2) itself, so it goes last.
        seccompiler::apply_filter_all_threads(&clone3)?;
        seccompiler::apply_filter_all_threads(&allowlist)?;
        tracing::info!("seccomp: filter installed");
    }
    Ok(Confinement {
        filesystem,
        seccomp: opts.seccomp,
    })
}
