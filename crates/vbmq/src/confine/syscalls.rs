//! The seccomp allowlist: the system calls vbmq makes after setup, found by running the daemon
//! under `strace -f --seccomp=off` through the hostile batteries (connects, I/O in event and
//! adaptive mode, reconnects, SIGTERM). Sockets are bound before confinement, so a compromised
//! vbmq cannot open new ones. Kept though rarely seen: fallbacks of std and the C library
//! (`clone` when `clone3` is refused, `tgkill` for `abort`) and positional I/O and sync calls
//! for engines that do not go through io_uring. The allocator's calls are listed from what glibc's
//! malloc, realloc and free make, not only from what a run happened to show.

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

/// Calls allowed with any arguments.
const ALLOWED: &[libc::c_long] = &[
    // storage engine and guest memory. Rings are created and registered before confinement:
    // `io_uring_setup` and `io_uring_register` are refused after it, so no code in vbmq can
    // build a ring without the restrictions (a ring's SOCKET or OPENAT would bypass this filter).
    // (`fixed-buffers=on` and spare rings for run-time disks keep `io_uring_register`: every
    // ring is restricted, and only those rings accept a register operation, the buffer
    // registrations or the update of their four file slots.)
    libc::SYS_io_uring_enter,
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_fallocate,
    libc::SYS_lseek,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    // whether a guest memory region lives on hugetlbfs (`memory_faults`)
    libc::SYS_fstatfs,
    // The allocator: brk and mmap for new memory, mremap when realloc grows a chunk that
    // lives in its own mapping (above malloc's mmap threshold), munmap and madvise when memory
    // is returned, mprotect when a thread arena's heap grows and for thread stack guards.
    libc::SYS_mmap,
    libc::SYS_mremap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    // an encrypted disk added at run time locks its key's page (backend/crypt/key_page.rs)
    libc::SYS_mlock,
    libc::SYS_brk,
    // paths are confined by Landlock; std opens /proc and /sys files for thread counts
    libc::SYS_openat,
    libc::SYS_close,
    libc::SYS_fcntl,
    libc::SYS_unlinkat,
    // vhost-user control plane and kicks
    libc::SYS_accept4,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_shutdown,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_ppoll,
    libc::SYS_eventfd2,
    // in-flight tracking: GET_INFLIGHT_FD creates a sealed memfd for the frontend to keep
    libc::SYS_memfd_create,
    libc::SYS_ftruncate,
    // I/O limits: each connection's queues make a timer, armed while the limits hold requests
    // back (and the delay-us test knob's timer)
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    // threads, time, signals, exit
    libc::SYS_clone3,
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_yield,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_tgkill,
    libc::SYS_prctl,
    libc::SYS_getrandom,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_sigaltstack,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_epoll_wait,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_poll,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_unlink,
];

/// Calls added when an RBD disk is served, made by librados' and librbd's own threads while
/// serving (seen under `strace -f` through tests/rbd.rs, the OSD stopped and killed included).
const CEPH: &[libc::c_long] = &[
    // TCP connections to monitors and OSDs, opened and reopened on demand (a new OSD in the
    // map, a reset connection); `socket` itself is limited to TCP below
    libc::SYS_connect,
    libc::SYS_setsockopt,
    libc::SYS_getsockname,
    // the messenger's check of a non-blocking connect's outcome (SO_ERROR)
    libc::SYS_getsockopt,
    // a new connection's wake-up pipe
    libc::SYS_pipe2,
    // the host name, which librados sends in its session metadata
    libc::SYS_uname,
];

/// Calls added with a control socket: its clients' requests and replies (std's socket reads
/// and writes are recv and send), and disks added at run time: binding a new disk's socket
/// (owner-only by `fchmod` before `bind`, under a temporary name, given its group and mode
/// through an `O_PATH` descriptor, renamed into place), taking its lock, and checking that
/// both files are vbmq's user's (`geteuid`).
const RUN_TIME_DISKS: &[libc::c_long] = &[
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_flock,
    libc::SYS_geteuid,
    libc::SYS_fchmod,
    libc::SYS_chmod,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_rename,
    libc::SYS_renameat,
    libc::SYS_renameat2,
];

/// Calls added when a thin disk's base is an NBD export (or may be, with a control socket): the
/// fetcher connects to the export's Unix socket path, at start and after a lost connection
/// (`socket` is limited to Unix stream sockets below), and std's socket reads are `recvfrom`.
const NBD_CLIENT: &[libc::c_long] = &[libc::SYS_connect, libc::SYS_recvfrom, libc::SYS_sendto];

/// `ioctl` requests allowed (argument 1): std's non-blocking and close-on-exec switches. Block
/// device sizes and terminal probing happen before confinement.
/// (`c_ulong` is `u64` on both architectures seccompiler supports.)
/// The passthrough of `--fs` shares (fuse-backend-rs): the file system calls virtiofsd's own
/// allowlist names for the same work, with per-thread credential switches for creating files
/// as the guest's user.
const SHARES: &[libc::c_long] = &[
    libc::SYS_dup,
    libc::SYS_openat2,
    libc::SYS_fstatfs,
    libc::SYS_getdents64,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_readlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_fgetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_flistxattr,
    libc::SYS_fremovexattr,
    libc::SYS_getxattr,
    libc::SYS_setxattr,
    libc::SYS_listxattr,
    libc::SYS_removexattr,
    libc::SYS_copy_file_range,
    libc::SYS_flock,
    libc::SYS_syncfs,
    libc::SYS_fchdir,
    libc::SYS_umask,
    libc::SYS_name_to_handle_at,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    libc::SYS_geteuid,
    libc::SYS_getegid,
    libc::SYS_capget,
    libc::SYS_capset,
];

const IOCTLS: &[u64] = &[libc::FIONBIO, libc::FIOCLEX];

/// With a control socket: a block device passed for a run-time disk is measured (its size,
/// logical and physical block sizes: `BLKGETSIZE64`, `BLKSSZGET`, `BLKPBSZGET`); they only read.
const BLOCK_SIZE_IOCTLS: &[u64] = &[0x8008_1272, 0x1268, 0x127b];

/// With a control socket: `vbmq ctl snapshot` clones an image into the file it passed
/// (`FICLONE`, on file systems that can), and nothing else.
const SNAPSHOT_IOCTLS: &[u64] = &[0x4004_9409];

/// Compiles the allowlist; anything else raises SIGSYS (reported, then the process exits).
/// `run_time_disks`: the calls [`RUN_TIME_DISKS`] names, and Unix sockets beside TCP ones;
/// `nbd_client`: those [`NBD_CLIENT`] names, and Unix sockets.
pub(super) fn filter(
    ceph: bool,
    run_time_disks: bool,
    shares: bool,
    uring_register: bool,
    nbd_client: bool,
) -> Result<BpfProgram, BackendError> {
    let extra: &[libc::c_long] = if ceph { CEPH } else { &[] };
    let run_time: &[libc::c_long] = if run_time_disks { RUN_TIME_DISKS } else { &[] };
    let share_calls: &[libc::c_long] = if shares { SHARES } else { &[] };
    let nbd: &[libc::c_long] = if nbd_client { NBD_CLIENT } else { &[] };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
        .iter()
        .chain(extra)
        .chain(nbd)
        .chain(run_time)
        .chain(share_calls)
        .chain(uring_register.then_some(&libc::SYS_io_uring_register))
        .map(|&nr| (nr, Vec::new()))
        .collect();
    // TCP over IPv4 or IPv6 only for Ceph, Unix stream sockets only for run-time disks: no
    // netlink, UDP or raw sockets. (The type's low bits; SOCK_CLOEXEC and SOCK_NONBLOCK are
    // flags above them.)
    let domain = |family: u64| {
        SeccompRule::new(vec![
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, family)?,
            SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(0xf),
                libc::SOCK_STREAM.unsigned_abs().into(),
            )?,
        ])
    };
    let mut families = Vec::new();
    if ceph {
        families.push(domain(libc::AF_INET.unsigned_abs().into())?);
        families.push(domain(libc::AF_INET6.unsigned_abs().into())?);
    }
    if run_time_disks || nbd_client {
        families.push(domain(libc::AF_UNIX.unsigned_abs().into())?);
    }
    if !families.is_empty() {
        rules.insert(libc::SYS_socket, families);
    }
    // An NBD connection over TLS is relayed to the NBD code through a Unix socket pair
    // (nbd/tls/relay.rs); exports and mirrors come with a control socket.
    if run_time_disks {
        rules.insert(
            libc::SYS_socketpair,
            vec![domain(libc::AF_UNIX.unsigned_abs().into())?],
        );
    }
    let ioctl_rules = IOCTLS
        .iter()
        .chain(if run_time_disks {
            BLOCK_SIZE_IOCTLS
        } else {
            &[]
        })
        .chain(if run_time_disks { SNAPSHOT_IOCTLS } else { &[] })
        .map(|&request| {
            SeccompRule::new(vec![SeccompCondition::new(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                request,
            )?])
        })
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    socket_option_rules(&mut rules, ceph, run_time_disks || nbd_client)?;
    // A share's queue threads take a umask of their own (`unshare(CLONE_FS)`), and nothing
    // else: no namespace.
    if shares {
        rules.insert(
            libc::SYS_unshare,
            vec![SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::Eq,
                libc::CLONE_FS as u64,
            )?])?],
        );
    }
    // Threads only: a clone without CLONE_THREAD would be a new process.
    rules.insert(
        libc::SYS_clone,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
            libc::CLONE_THREAD as u64,
        )?])?],
    );
    SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, arch()?)?.try_into()
}

/// `getsockopt` and `setsockopt`: the `SOL_SOCKET` options vbmq's own checks use, unless Ceph
/// is served (librados' connects need every option).
fn socket_option_rules(
    rules: &mut BTreeMap<i64, Vec<SeccompRule>>,
    ceph: bool,
    run_time_disks: bool,
) -> Result<(), BackendError> {
    // The vhost crate checks that the backend channel a frontend sends (SET_BACKEND_REQ_FD) is
    // a Unix stream socket: SO_DOMAIN and SO_TYPE only; SO_ACCEPTCONN too, for the listening
    // sockets `vbmq ctl` passes (RBD disks allow every option: librados' connects check
    // SO_ERROR).
    // A mirror's destination, connected by `vbmq ctl` and passed, is given a deadline for its
    // NBD handshake (SO_RCVTIMEO, SO_SNDTIMEO) and nothing else (RBD disks allow every option);
    // so is each connection of an NBD base's fetcher (`nbd_client`, folded into
    // `run_time_disks` by the caller).
    if run_time_disks && !ceph {
        rules.insert(
            libc::SYS_setsockopt,
            vec![
                socket_option(libc::SO_RCVTIMEO)?,
                socket_option(libc::SO_SNDTIMEO)?,
            ],
        );
    }
    // A socket passed for a run-time disk or share, or inherited, is checked to listen.
    if !ceph {
        rules.insert(
            libc::SYS_getsockopt,
            vec![
                socket_option(libc::SO_DOMAIN)?,
                socket_option(libc::SO_TYPE)?,
                socket_option(libc::SO_ACCEPTCONN)?,
                // The control client's user, whose files it may pass (SECURITY.md).
                socket_option(libc::SO_PEERCRED)?,
            ],
        );
    }
    Ok(())
}

/// A rule matching `SOL_SOCKET` option `option`.
fn socket_option(option: libc::c_int) -> Result<SeccompRule, BackendError> {
    SeccompRule::new(vec![
        SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            libc::SOL_SOCKET.unsigned_abs().into(),
        )?,
        SeccompCondition::new(
            2,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Eq,
            option.unsigned_abs().into(),
        )?,
    ])
}

/// A filter stacked before [`filter`]: `clone3` passes its flags in memory a filter cannot
/// read, so it gets `ENOSYS` and the C library falls back to `clone`, whose flags are checked.
/// (The kernel applies the strictest result of all filters, so `ENOSYS` wins over the allow.)
pub(super) fn clone3_fallback() -> Result<BpfProgram, BackendError> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let enosys = SeccompAction::Errno(libc::ENOSYS as u32);
    SeccompFilter::new(rules, SeccompAction::Allow, enosys, arch()?)?.try_into()
}

fn arch() -> Result<seccompiler::TargetArch, BackendError> {
    std::env::consts::ARCH.try_into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` in a child process under the allowlist; returns how the child ended.
    fn under_filter(body: fn()) -> libc::c_int {
        under(
            &filter(false, false, false, false, false).expect("filter"),
            body,
        )
    }

    /// Runs `body` in a child process under `filter`; returns how the child ended.
    fn under(filter: &BpfProgram, body: fn()) -> libc::c_int {
        // SAFETY: the child only installs a filter, runs `body` and exits; glibc's fork leaves
        // malloc usable in the child.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let status = match seccompiler::apply_filter(filter) {
                Ok(()) => {
                    body();
                    0
                }
                Err(_) => 3,
            };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(status) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        status
    }

    #[test]
    fn a_vec_growing_in_its_own_mapping_survives_the_filter() {
        // Above glibc's largest mmap threshold (32 MiB): the buffer is a mapping of its own,
        // and growing it is mremap.
        let status = under_filter(|| {
            let mut v: Vec<u8> = vec![1; 40 << 20];
            v.reserve(80 << 20);
            v.resize(100 << 20, 2);
            std::hint::black_box(&v);
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child ended with status {status:#x} (signal {})",
            libc::WTERMSIG(status)
        );
    }

    #[test]
    fn no_ring_can_be_created_under_the_filter() {
        let status = under_filter(|| {
            let _ = io_uring::IoUring::new(8);
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "io_uring_setup must be refused: status {status:#x}"
        );
    }

    #[test]
    fn with_a_control_socket_ficlone_is_allowed_and_other_file_ioctls_are_not() {
        use std::os::fd::AsRawFd;
        let run_time = filter(false, true, false, false, false).expect("filter");
        let status = under(&run_time, || {
            let (a, b) = (tempfile::tempfile(), tempfile::tempfile());
            let (Ok(a), Ok(b)) = (a, b) else {
                // SAFETY: ends the child without running the parent's exit handlers.
                unsafe { libc::_exit(5) }
            };
            // SAFETY: FICLONE takes the source's descriptor number; it may fail, not trap.
            unsafe { libc::ioctl(b.as_raw_fd(), 0x4004_9409, a.as_raw_fd()) };
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "FICLONE: status {status:#x}"
        );
        let status = under(&run_time, || {
            let Ok(a) = tempfile::tempfile() else {
                // SAFETY: ends the child without running the parent's exit handlers.
                unsafe { libc::_exit(5) }
            };
            let mut flags: libc::c_long = 0;
            // SAFETY: FS_IOC_GETFLAGS writes one long; refused by the filter first.
            unsafe { libc::ioctl(a.as_raw_fd(), 0x8008_6601, &mut flags) };
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "FS_IOC_GETFLAGS must be refused: status {status:#x}"
        );
    }

    #[test]
    fn a_share_thread_may_unshare_its_umask_and_nothing_else() {
        let shares = filter(false, false, true, false, false).expect("filter");
        let status = under(&shares, || {
            // SAFETY: detaches this thread's cwd, root and umask; the child exits after.
            let ret = unsafe { libc::unshare(libc::CLONE_FS) };
            // SAFETY: ends the child without running the parent's exit handlers.
            unsafe { libc::_exit(if ret == 0 { 0 } else { 4 }) };
        });
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "unshare(CLONE_FS): status {status:#x}"
        );
        let status = under(&shares, || {
            // SAFETY: refused by the filter before it does anything.
            unsafe { libc::unshare(libc::CLONE_FS | libc::CLONE_NEWNS) };
        });
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "unshare of a namespace must be refused: status {status:#x}"
        );
    }
}
