//! `vbmq serve`: open the disks and shares, bind their sockets, serve until SIGTERM or SIGINT.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::info;

use crate::config::{DiskSpec, Storage, check_sockets};
use crate::confine::{CephAccess, ConfineOptions, DiskAccess, confine};
use crate::devices::build_share;
use crate::host::raise_descriptor_limit;
use crate::host::{Host, Prepared, RunTimePolicy, ShareRoot};
use crate::vhost_user::ShareServer;

/// What `vbmq serve` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The disks, each already parsed with [`DiskSpec::parse`].
    pub disks: Vec<DiskSpec>,
    /// Each disk's `--disk` text, as `list` shows it.
    pub texts: Vec<String>,
    /// The directories shared over vhost-user-fs.
    pub shares: Vec<crate::config::FsSpec>,
    /// Each share's `--fs` text, as `list` shows it.
    pub share_texts: Vec<String>,
    /// Directories beneath which `vbmq ctl add-fs` may share (`--fs-root`): the confinement
    /// treats everything beneath them as a share's.
    pub fs_roots: Vec<PathBuf>,
    /// Confine the process with seccomp (Landlock applies either way).
    pub seccomp: bool,
    /// The directory of the control socket, when there is one: run-time disks' sockets go
    /// there, and the confinement lets the process make them.
    pub control_dir: Option<PathBuf>,
    /// The configuration file, read again on SIGHUP or `vbmq ctl reload`: its directory stays
    /// readable.
    pub config: Option<PathBuf>,
    /// A line written to stderr once every socket listens and the process is confined (the
    /// line virtiofsd prints, which Kata waits for).
    pub ready_line: Option<String>,
    /// Spare io_uring rings for file disks added at run time, made before confinement when
    /// there is a control socket (`--run-time-rings`).
    pub run_time_rings: usize,
    /// `vbmq virtiofsd --uid-map/--gid-map`: the user namespace the process enters once its
    /// share is open and its socket bound, before it starts a thread.
    pub user_namespace: Option<Box<crate::confine::UserNamespace>>,
    /// The option that asked for a kernel wall around the share (`--sandbox namespace`):
    /// without Landlock, the process refuses to serve and says so, naming it.
    pub landlock_required: Option<String>,
}

/// Starts the control server once the process is confined (its socket bound before).
pub type ControlStart = Box<dyn FnOnce(Arc<Host>)>;

/// What the process may still reach once serving: its disks and its sockets.
fn confine_options(
    specs: &[DiskSpec],
    ceph_files: Vec<PathBuf>,
    options: &ServeOptions,
    share_roots: Vec<Arc<std::fs::File>>,
) -> ConfineOptions {
    ConfineOptions {
        disks: specs
            .iter()
            .filter_map(|spec| match &spec.storage {
                Storage::File(path) => Some(DiskAccess {
                    path: path.clone(),
                    writable: !spec.readonly,
                    held: None,
                }),
                // Null and memory disks touch no file once loaded; RBD disks reach their
                // cluster over TCP.
                Storage::Null(_) | Storage::Memory { .. } | Storage::Rbd(_) => None,
            })
            .collect(),
        ceph: specs
            .iter()
            .any(|spec| matches!(spec.storage, Storage::Rbd(_)))
            .then_some(CephAccess { files: ceph_files }),
        // A share's rule is made on the directory it serves, not on what `dir=` leads to now.
        shares: options
            .shares
            .iter()
            .zip(share_roots)
            .map(|(share, root)| DiskAccess {
                path: share.dir.clone(),
                writable: !share.readonly,
                held: Some(root),
            })
            .chain(options.fs_roots.iter().map(|root| DiskAccess {
                path: root.clone(),
                writable: true,
                held: None,
            }))
            .collect(),
        sockets: specs
            .iter()
            .map(|spec| spec.socket.clone())
            .chain(
                options
                    .shares
                    .iter()
                    // An inherited socket (`--fd`) has no file of vbmq's to remove.
                    .filter(|share| share.listen_fd.is_none())
                    .map(|share| share.socket.clone()),
            )
            .collect(),
        run_time_socket_dirs: options.control_dir.iter().cloned().collect(),
        read_dirs: options
            .config
            .iter()
            .filter_map(|file| file.parent().map(Path::to_path_buf))
            .map(|dir| {
                if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                }
            })
            .collect(),
        // An NBD base's fetcher connects (a run-time disk's too, with a control socket).
        nbd_client: options.control_dir.is_some()
            || specs.iter().any(|spec| spec.base_nbd.is_some()),
        // Buffer registrations (`fixed-buffers=on`); a spare ring's file slots.
        uring_register: specs.iter().any(|spec| spec.fixed_buffers)
            || crate::backend::ring_pool::available() > 0,
        seccomp: options.seccomp,
    }
}

/// Blocks SIGTERM, SIGINT, SIGUSR1 and SIGHUP in this thread (and the threads it spawns) and returns
/// the set.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise a local set; pthread_sigmask only changes the
    // calling thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Runs `vbmq serve`; returns the exit status. `control` starts the control server.
pub fn run(options: &ServeOptions, control: Option<ControlStart>) -> i32 {
    match serve_until_stopped(options, control) {
        Ok(()) => 0,
        Err(status) => status,
    }
}

/// [`run`], with the exit status of a failure as the error (its cause already printed).
fn serve_until_stopped(options: &ServeOptions, control: Option<ControlStart>) -> Result<(), i32> {
    let specs = &options.disks;
    if let Err(e) = check_sockets(specs, &options.shares, &[]) {
        eprintln!("vbmq: {e}");
        return Err(2);
    }
    let signals = block_stop_signals();
    let host = Arc::new(Host::new());
    let (prepared, ceph_files) = prepare_disks(&host, options)?;
    let share_servers = open_shares(&host, options)?;
    // Every file is open and every socket bound as the operator's user; no thread runs yet.
    if let Some(namespace) = &options.user_namespace
        && let Err(e) = namespace.enter()
    {
        eprintln!("vbmq: cannot enter the user namespace of --uid-map/--gid-map: {e}");
        return Err(1);
    }
    // Before any frontend can send a memory table.
    if let Err(e) = crate::guest::memory_faults::install_handler() {
        eprintln!("vbmq: cannot install the SIGBUS handler: {e}");
        return Err(1);
    }
    if options.control_dir.is_some()
        && options.run_time_rings > 0
        && let Err(e) = crate::backend::ring_pool::fill(options.run_time_rings)
    {
        // Run-time disks then go without io_uring, as with `--run-time-rings 0`.
        tracing::warn!(
            "cannot make {} spare io_uring rings (--run-time-rings): {e}",
            options.run_time_rings
        );
    }
    // Every disk's socket listens (bound in `prepare`): frontends may connect from now on.
    crate::systemd::notify_ready();
    // The rings a confined process may still take are the spare ones from here on.
    crate::backend::ring_pool::seal();
    confine_process(specs, ceph_files, options, &share_servers)?;
    if let Some(line) = &options.ready_line {
        eprintln!("{line}");
    }
    host.set_policy(RunTimePolicy {
        confined: true,
        socket_dirs: options.control_dir.iter().cloned().collect(),
    });
    start_all(&host, prepared, share_servers, options)?;
    if let Some(control) = control {
        control(Arc::clone(&host));
    }
    info!(
        "serving {} disk(s) and {} share(s)",
        specs.len(),
        options.shares.len()
    );
    wait_for_stop(&host, &signals);
    let report = host.report();
    host.stop_all();
    crate::backend::release_clusters();
    crate::backend::release_image_locks();
    for line in report {
        info!("statistics {line}");
    }
    Ok(())
}

/// Opens every start-up disk and binds its socket; returns them with the Ceph files they read.
fn prepare_disks(
    host: &Host,
    options: &ServeOptions,
) -> Result<(Vec<Prepared>, Vec<PathBuf>), i32> {
    let mut prepared = Vec::new();
    let mut ceph_files = Vec::new();
    for (i, spec) in options.disks.iter().enumerate() {
        let text = options.texts.get(i).cloned().unwrap_or_default();
        match host.prepare(&text, spec.clone()) {
            Ok(disk) => {
                ceph_files.extend(disk.files().iter().cloned());
                prepared.push(disk);
            }
            Err(e) => {
                eprintln!("vbmq: {e}");
                return Err(2);
            }
        }
    }
    Ok((prepared, ceph_files))
}

/// Opens the `--fs-root` directories and every start-up share, binding its socket.
fn open_shares(host: &Host, options: &ServeOptions) -> Result<Vec<ShareServer>, i32> {
    if !options.shares.is_empty() || !options.fs_roots.is_empty() {
        raise_descriptor_limit();
    }
    let mut roots = Vec::new();
    for root in &options.fs_roots {
        match ShareRoot::open(root) {
            Ok(root) => roots.push(root),
            Err(e) => {
                eprintln!("vbmq: --fs-root {}: {e}", root.display());
                return Err(2);
            }
        }
    }
    host.set_share_roots(roots);
    for share in &options.shares {
        host.reserve_socket(crate::host::SHARE, share.socket.clone());
    }
    let mut share_servers = Vec::new();
    for share in &options.shares {
        match build_share(share) {
            Ok(server) => share_servers.push(server),
            Err(e) => {
                eprintln!("vbmq: {e}");
                return Err(2);
            }
        }
    }
    Ok(share_servers)
}

/// Confines the process; refuses to go on without Landlock where an option asked for it.
fn confine_process(
    specs: &[DiskSpec],
    ceph_files: Vec<PathBuf>,
    options: &ServeOptions,
    share_servers: &[ShareServer],
) -> Result<(), i32> {
    let mut share_roots = Vec::new();
    for server in share_servers {
        match server.root().try_clone() {
            Ok(root) => share_roots.push(Arc::new(root)),
            Err(e) => {
                eprintln!("vbmq: cannot confine the process: a share's directory: {e}");
                return Err(1);
            }
        }
    }
    match confine(&confine_options(specs, ceph_files, options, share_roots)) {
        Err(e) => {
            eprintln!("vbmq: cannot confine the process: {e}");
            Err(1)
        }
        Ok(done) => {
            if let Some(option) = &options.landlock_required
                && done.filesystem == crate::confine::FilesystemStatus::Unsupported
            {
                eprintln!(
                    "vbmq: {option}: this kernel has no Landlock, the wall vbmq puts around a \
                     share (vbmq neither chroots nor pivots); --sandbox none serves without it"
                );
                return Err(1);
            }
            Ok(())
        }
    }
}

/// Starts serving the prepared disks and the shares; on a failure stops all and returns 1.
fn start_all(
    host: &Host,
    prepared: Vec<Prepared>,
    share_servers: Vec<ShareServer>,
    options: &ServeOptions,
) -> Result<(), i32> {
    for disk in prepared {
        if let Err(e) = host.start(disk) {
            eprintln!("vbmq: {e}");
            host.stop_all();
            return Err(1);
        }
    }
    for (i, (server, spec)) in share_servers.into_iter().zip(&options.shares).enumerate() {
        let text = options.share_texts.get(i).cloned().unwrap_or_default();
        if let Err(e) = host.start_share(server, spec.clone(), text) {
            eprintln!("vbmq: {e}");
            host.stop_all();
            return Err(1);
        }
    }
    Ok(())
}

/// Serves until SIGTERM or SIGINT: SIGHUP reloads the configuration, SIGUSR1 prints statistics.
fn wait_for_stop(host: &Host, signals: &libc::sigset_t) {
    loop {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals in `signals`.
        if unsafe { libc::sigwait(signals, &mut signal) } != 0 {
            continue;
        }
        if signal == libc::SIGHUP {
            // A refused reload changes nothing and says why in the log.
            match host.reload(false) {
                Ok(changes) => info!("configuration reloaded: {}", changes.join("; ")),
                Err(e) => tracing::error!("configuration not reloaded: {e}"),
            }
            continue;
        }
        if signal != libc::SIGUSR1 {
            info!("signal {signal}: completing in-flight I/O and exiting");
            break;
        }
        // Asked for by the operator: printed whatever the log level.
        for line in host.report() {
            eprintln!("vbmq: statistics {line}");
        }
    }
}
