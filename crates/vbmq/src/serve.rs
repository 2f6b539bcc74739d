//! `vbmq serve`: open the disks and shares, bind their sockets, serve until SIGTERM or SIGINT.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::backend::cache::ImageId;
use crate::backend::{CachedDisk, DelayedDisk, Disk, FileDisk, MemoryDisk, NullDisk, RbdDisk};
use crate::config::{DiskSpec, SpecError, Storage};
use crate::confine::{CephAccess, ConfineOptions, DiskAccess, confine};
use crate::host::{Host, RunTimePolicy};
use crate::shares::{build_share, raise_descriptor_limit, start_share, stop_shares};
use crate::vhost_user::DiskServer;
use crate::virtio_blk::BlkDevice;
use crate::worker::QueueSettings;

/// What `vbmq serve` was asked to do.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The disks, each already parsed with [`DiskSpec::parse`].
    pub disks: Vec<DiskSpec>,
    /// Each disk's `--disk` text, as `list` shows it.
    pub texts: Vec<String>,
    /// The directories shared over vhost-user-fs.
    pub shares: Vec<crate::config::FsSpec>,
    /// Confine the process with seccomp (Landlock applies either way).
    pub seccomp: bool,
    /// The directory of the control socket, when there is one: run-time disks' sockets go
    /// there, and the confinement lets the process make them.
    pub control_dir: Option<PathBuf>,
    /// The configuration file, read again on SIGHUP or `vbmq ctl reload`: its directory stays
    /// readable.
    pub config: Option<PathBuf>,
}

/// Starts the control server once the process is confined (its socket bound before).
pub type ControlStart = Box<dyn FnOnce(Arc<Host>)>;

/// Checks what no single disk can see on its own: one socket given to two disks. (Queues of
/// several disks may share a CPU: its one thread serves them all.)
pub fn check_disks(specs: &[DiskSpec]) -> Result<(), SpecError> {
    check_sockets(specs, &[], &[])
}

/// Checks that no socket path is given twice: to two disks, two shares, a disk and a share,
/// or to either and a socket the process serves besides (`others`: the control socket, named by
/// its flag). The second bind would take the first's path from it.
pub fn check_sockets(
    disks: &[DiskSpec],
    shares: &[crate::config::FsSpec],
    others: &[(&str, &Path)],
) -> Result<(), SpecError> {
    let mut sockets: Vec<(&Path, &str)> = disks
        .iter()
        .map(|s| (s.socket.as_path(), "a disk"))
        .chain(shares.iter().map(|s| (s.socket.as_path(), "a share")))
        .chain(others.iter().map(|&(what, path)| (path, what)))
        .collect();
    sockets.sort_unstable();
    let Some(pair) = sockets.windows(2).find(|pair| pair[0].0 == pair[1].0) else {
        return Ok(());
    };
    let (path, a, b) = (pair[0].0.display(), pair[0].1, pair[1].1);
    let reason = match (a, b) {
        ("a disk", "a disk") => format!("{path} is given to two disks"),
        ("a share", "a share") => format!("{path} is given to two shares (--fs socket)"),
        _ => format!("{path} is given to {a} and to {b}"),
    };
    Err(SpecError {
        key: "socket".into(),
        reason,
    })
}

fn default_serial(spec: &DiskSpec) -> String {
    match &spec.storage {
        // The file name's last 20 bytes (on a character boundary): what tells disks apart.
        Storage::File(path) => {
            let name = path
                .file_name()
                .map_or("vbmq".into(), |n| n.to_string_lossy().into_owned());
            let mut start = name.len().saturating_sub(20);
            while !name.is_char_boundary(start) {
                start += 1;
            }
            name[start..].to_string()
        }
        Storage::Null(_) => "vbmq-null".into(),
        Storage::Memory { .. } => "vbmq-mem".into(),
        Storage::Rbd(target) => {
            let name = &target.image;
            let mut start = name.len().saturating_sub(20);
            while !name.is_char_boundary(start) {
                start += 1;
            }
            name[start..].to_string()
        }
    }
}

/// An open disk and the files it keeps reading (a Ceph configuration and keyring).
fn open_disk(spec: &DiskSpec) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    let (disk, files) = open_storage(spec)?;
    if spec.delay_us == 0 {
        return Ok((disk, files));
    }
    let delay = Duration::from_micros(spec.delay_us);
    let delayed: Arc<dyn Disk> = Arc::new(DelayedDisk::new(disk, delay, spec.delay_every));
    Ok((delayed, files))
}

fn open_storage(spec: &DiskSpec) -> Result<(Arc<dyn Disk>, Vec<PathBuf>), SpecError> {
    if let Storage::Rbd(target) = &spec.storage {
        let disk = RbdDisk::open(target, spec.readonly).map_err(|e| SpecError {
            key: "rbd".into(),
            reason: format!("{}/{}: {e}", target.pool, target.image),
        })?;
        let files = disk.files().to_vec();
        let disk: Arc<dyn Disk> = Arc::new(disk);
        if spec.cache == 0 {
            return Ok((disk, files));
        }
        let name = format!("{}/{}/{}", target.pool, target.namespace, target.image);
        let id = ImageId::Rbd(format!("{}:{name}", target.conf.display()));
        let label = spec.socket.display().to_string();
        let cached =
            CachedDisk::open_image(disk, id, &name, spec.cache, &label).map_err(|e| SpecError {
                key: "cache".into(),
                reason: e.to_string(),
            })?;
        return Ok((Arc::new(cached), files));
    }
    open_local_disk(spec).map(|disk| (disk, Vec::new()))
}

fn open_local_disk(spec: &DiskSpec) -> Result<Arc<dyn Disk>, SpecError> {
    match &spec.storage {
        Storage::File(path) => {
            let disk: Arc<dyn Disk> = FileDisk::open(path, spec.readonly, spec.direct)
                .and_then(|disk| {
                    if spec.lock {
                        disk.lock(spec.handover)
                    } else {
                        Ok(disk)
                    }
                })
                .map(|disk| {
                    if spec.ring_only {
                        disk.ring_only()
                    } else {
                        disk
                    }
                })
                .and_then(|disk| match spec.sqpoll {
                    Some(cpu) => disk.sqpoll(cpu),
                    None => Ok(disk),
                })
                .map(|disk| {
                    if spec.fixed_buffers {
                        disk.fixed_buffers()
                    } else {
                        disk
                    }
                })
                .map(Arc::new)
                .map_err(|e| SpecError {
                    key: "path".into(),
                    reason: format!("{}: {e}", path.display()),
                })?;
            if spec.cache == 0 {
                return Ok(disk);
            }
            let label = spec.socket.display().to_string();
            let cached =
                CachedDisk::open(disk, path, spec.cache, &label).map_err(|e| SpecError {
                    key: "cache".into(),
                    reason: e.to_string(),
                })?;
            if spec.cache_preload {
                cached.preload(path).map_err(|e| SpecError {
                    key: "cache-preload".into(),
                    reason: format!("{}: {e}", path.display()),
                })?;
            }
            Ok(Arc::new(cached))
        }
        Storage::Null(size) => Ok(Arc::new(NullDisk::new(*size))),
        Storage::Memory { size, image } => {
            let disk = match image {
                Some(image) => MemoryDisk::load(*size, image),
                None => MemoryDisk::new(*size),
            };
            disk.map(|disk| Arc::new(disk) as Arc<dyn Disk>)
                .map_err(|e| match image {
                    Some(image) => SpecError {
                        key: "image".into(),
                        reason: format!("{}: {e}", image.display()),
                    },
                    None => SpecError {
                        key: "mem".into(),
                        reason: e.to_string(),
                    },
                })
        }
        Storage::Rbd(_) => Err(SpecError {
            key: "rbd".into(),
            reason: "opened by open_disk: a defect".into(),
        }),
    }
}

/// The server of one disk, the disk (to close at exit) and the files it keeps reading.
pub(crate) type Built = (DiskServer, Arc<dyn Disk>, Vec<PathBuf>);

pub(crate) fn build_server(spec: &DiskSpec) -> Result<Built, SpecError> {
    let (disk, files) = open_disk(spec)?;
    let kept = Arc::clone(&disk);
    let serial = spec.serial.clone().unwrap_or_else(|| default_serial(spec));
    let device = Arc::new(BlkDevice::new(
        disk.as_ref(),
        spec.readonly,
        u16::try_from(spec.queues).unwrap_or(u16::MAX),
        &serial,
    ));
    device.limits.set(spec.limits);
    device.set_writer_seat(disk.writer_seat());
    let settings = (0..spec.queues)
        .map(|i| QueueSettings {
            mode: spec.mode,
            poll: Duration::from_micros(spec.poll_us),
            cpu: spec.cpus.get(i).copied(),
            batch: spec.batch,
            max_size: spec.queue_size,
        })
        .collect();
    let (mode, group) = (spec.socket_mode, spec.socket_group);
    DiskServer::bind(&spec.socket, mode, group, device, disk, settings)
        .map(|server| (server.track_inflight(spec.inflight), kept, files))
        .map_err(|e| SpecError {
            key: "socket".into(),
            reason: e.to_string(),
        })
}

/// What the process may still reach once serving: its disks and its sockets.
fn confine_options(
    specs: &[DiskSpec],
    ceph_files: Vec<PathBuf>,
    options: &ServeOptions,
) -> ConfineOptions {
    ConfineOptions {
        disks: specs
            .iter()
            .filter_map(|spec| match &spec.storage {
                Storage::File(path) => Some(DiskAccess {
                    path: path.clone(),
                    writable: !spec.readonly,
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
        shares: options
            .shares
            .iter()
            .map(|share| DiskAccess {
                path: share.dir.clone(),
                writable: !share.readonly,
            })
            .collect(),
        sockets: specs
            .iter()
            .map(|spec| spec.socket.clone())
            .chain(options.shares.iter().map(|share| share.socket.clone()))
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
        uring_register: specs.iter().any(|spec| spec.fixed_buffers),
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
    let specs = &options.disks;
    if let Err(e) = check_sockets(specs, &options.shares, &[]) {
        eprintln!("vbmq: {e}");
        return 2;
    }
    let signals = block_stop_signals();
    let host = Arc::new(Host::new());
    let mut prepared = Vec::new();
    let mut ceph_files = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let text = options.texts.get(i).cloned().unwrap_or_default();
        match host.prepare(&text, spec.clone()) {
            Ok(disk) => {
                ceph_files.extend(disk.files().iter().cloned());
                prepared.push(disk);
            }
            Err(e) => {
                eprintln!("vbmq: {e}");
                return 2;
            }
        }
    }
    if !options.shares.is_empty() {
        raise_descriptor_limit();
    }
    for share in &options.shares {
        host.reserve_socket("a share", share.socket.clone());
    }
    let mut share_servers = Vec::new();
    for share in &options.shares {
        match build_share(share) {
            Ok(server) => share_servers.push(server),
            Err(e) => {
                eprintln!("vbmq: {e}");
                return 2;
            }
        }
    }
    // Before any frontend can send a memory table.
    if let Err(e) = crate::guest::memory_faults::install_handler() {
        eprintln!("vbmq: cannot install the SIGBUS handler: {e}");
        return 1;
    }
    // Every disk's socket listens (bound in `prepare`): frontends may connect from now on.
    crate::systemd::notify_ready();
    if let Err(e) = confine(&confine_options(specs, ceph_files, options)) {
        eprintln!("vbmq: cannot confine the process: {e}");
        return 1;
    }
    host.set_policy(RunTimePolicy {
        confined: true,
        socket_dirs: options.control_dir.iter().cloned().collect(),
    });
    for disk in prepared {
        if let Err(e) = host.start(disk) {
            eprintln!("vbmq: {e}");
            host.stop_all();
            return 1;
        }
    }
    let mut shares = Vec::new();
    for server in share_servers {
        match start_share(server) {
            Ok(share) => shares.push(share),
            Err(e) => {
                eprintln!("vbmq: cannot start a share: {e}");
                stop_shares(shares);
                host.stop_all();
                return 1;
            }
        }
    }
    if let Some(control) = control {
        control(Arc::clone(&host));
    }
    info!(
        "serving {} disk(s) and {} share(s)",
        specs.len(),
        shares.len()
    );
    loop {
        let mut signal = 0;
        // SAFETY: waits for one of the blocked signals in `signals`.
        if unsafe { libc::sigwait(&signals, &mut signal) } != 0 {
            continue;
        }
        if signal == libc::SIGHUP {
            match host.reload() {
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
        for share in &shares {
            eprintln!("vbmq: statistics {}", (share.report)());
        }
    }
    let mut report = host.report();
    report.extend(shares.iter().map(|share| (share.report)()));
    stop_shares(shares);
    host.stop_all();
    crate::backend::release_image_locks();
    for line in report {
        info!("statistics {line}");
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_serial_is_the_end_of_the_file_name() {
        let spec = |path: &str| DiskSpec::parse(&format!("socket=/s,path={path}"), &[0]).unwrap();
        assert_eq!(default_serial(&spec("/images/vm1.raw")), "vm1.raw");
        assert_eq!(
            default_serial(&spec("/images/a-very-long-image-name-vm1.raw")),
            "ng-image-name-vm1.raw"[1..]
        );
        // Never a cut through a character.
        let serial = default_serial(&spec("/images/ééééééééééééééé.raw"));
        assert!(serial.len() <= 20 && serial.ends_with(".raw"), "{serial}");
    }
}
