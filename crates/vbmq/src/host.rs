//! The running disks of one `vbmq serve`, added and removed while the others go on: the typed
//! API the control socket speaks for (the JSON lives in the `vbmq` binary).

use std::fs::File;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::backend::{Disk, SnapshotReport};
use crate::config::check_sockets;
use crate::config::{DiskSpec, SpecError, Storage};
use crate::devices::{Built, Handles, Source, build_disk};
use crate::limits::Limits;
use crate::passed_fds::PassedDisk;
use crate::vhost_user::{Stopper, VhostUserBlk};
use crate::virtio_blk::{BlkDevice, resize_disk};
use crate::worker::{LATENCY_BUCKETS, QueueStats, online_cpus};

mod changes;
mod exports;
mod mirrors;
pub use exports::{ExportCheckpoints, ExportInfo};
pub use mirrors::{MirrorOptions, nbd_unix_uri};
mod reload;
mod run_time;
mod running_share;
mod shares;

use run_time::{KeptFiles, adopt_inherited};
pub(crate) use running_share::raise_descriptor_limit;
pub use shares::{
    DeviceInfo, DeviceKind, PassedShare, RELATIVE_SOCKET, SHARE, ShareInfo, ShareRoot,
};

/// One disk as `list` shows it.
#[derive(Clone, Debug)]
pub struct DiskInfo {
    /// The vhost-user socket: the disk's name.
    pub socket: PathBuf,
    /// The `--disk` text it was given.
    pub spec: String,
    /// Capacity in bytes.
    pub size: u64,
    /// Number of virtqueues.
    pub queues: usize,
    /// Whether a frontend is connected.
    pub connected: bool,
    /// The I/O limits in force.
    pub limits: Limits,
    /// Its changed-block maps (`track-changes=on`; none otherwise).
    pub checkpoints: Vec<crate::backend::changes::Checkpoint>,
    /// Its mirror's state (`mirror-begin`; none: never mirrored, or ended).
    pub mirror: Option<crate::backend::MirrorState>,
}

/// One queue's counters, as `stats` shows them.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueCounters {
    /// Requests by kind (`OpKind::NAMES`).
    pub ops: [u64; 4],
    /// Requests in flight.
    pub in_flight: u64,
    /// Passes over the ring.
    pub passes: u64,
    /// Passes that found work.
    pub busy_passes: u64,
    /// Completed requests by latency bucket (bucket `i`: under 2^i microseconds).
    pub latency_buckets: [u64; LATENCY_BUCKETS],
    /// Sum of the latencies, nanoseconds.
    pub latency_ns: u64,
    /// Requests answered `VIRTIO_BLK_S_UNSUPP` (the other errors are `IOERR`).
    pub unsupported: u64,
    /// Time the serving thread slept for this queue, nanoseconds.
    pub sleep_ns: u64,
    /// Latency percentiles p50, p90, p99, p99.9 in microseconds (bucket upper bounds).
    pub latency_us: [Option<u64>; 4],
    /// Requests completed.
    pub requests: u64,
    /// Requests completed with an error status.
    pub errors: u64,
    /// Bytes read by the guest.
    pub read_bytes: u64,
    /// Bytes written by the guest.
    pub write_bytes: u64,
}

/// One device's counters: a disk's or a share's.
#[derive(Clone, Debug)]
pub struct DiskCounters {
    /// The device's socket.
    pub socket: PathBuf,
    /// A disk or a share.
    pub kind: DeviceKind,
    /// Each queue's counters, by queue index.
    pub queues: Vec<QueueCounters>,
    /// The engine's own counters (cache hits, ...).
    pub engine: Vec<(&'static str, u64)>,
}

/// Why a control request failed: one line, as `--disk` errors are.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The spec was refused or the disk could not be opened or bound.
    #[error("{0}")]
    Spec(#[from] SpecError),
    /// No disk has this socket.
    #[error("no disk on {0}")]
    NoSuchDisk(PathBuf),
    /// No share has this socket.
    #[error("no share on {0}")]
    NoSuchShare(PathBuf),
    /// No disk and no share has this socket.
    #[error("no disk or share on {0}")]
    NoSuchDevice(PathBuf),
    /// The share's spec was refused, or its directory or socket cannot be served.
    #[error("{0}")]
    Share(#[from] crate::config::FsSpecError),
    /// The disk could not be started.
    #[error("{0}")]
    Start(String),
    /// The disk could not be resized.
    #[error("resize: {0}")]
    Resize(String),
    /// The snapshot was refused or failed.
    #[error("snapshot: {0}")]
    Snapshot(String),
    /// The export was refused or is unknown.
    #[error("export: {0}")]
    Export(String),
    /// The mirror was refused or failed.
    #[error("mirror: {0}")]
    Mirror(String),
    /// The disk has no changed-block maps.
    #[error("the disk on {0} has no track-changes=on")]
    NotTracked(PathBuf),
    /// A changed-block map request was refused.
    #[error("{0}")]
    Changes(#[from] crate::backend::changes::ChangeError),
}

struct Running {
    spec: DiskSpec,
    text: String,
    disk: Arc<dyn Disk>,
    /// The verbs the disk's layers answer (snapshots, exports, changed-block maps).
    handles: Handles,
    device: Arc<BlkDevice>,
    current: Arc<Mutex<Option<Arc<VhostUserBlk>>>>,
    stats: Vec<Arc<QueueStats>>,
    files: Vec<PathBuf>,
    /// Copies of a file disk's image descriptors, to serve it again after `reload --replace`.
    image: Option<KeptFiles>,
    stopper: Stopper,
    thread: Option<JoinHandle<()>>,
}

/// Where disks added at run time may be, once the process is confined.
#[derive(Clone, Debug, Default)]
pub struct RunTimePolicy {
    /// Set once the process is confined: only disks that need no new file or ring are added.
    pub confined: bool,
    /// Directories the confinement lets the process make sockets and lock files in.
    pub socket_dirs: Vec<PathBuf>,
}

/// Reads the configuration file again: its disks' `--disk` texts, or why it cannot be used.
pub type Reloader = Box<dyn Fn() -> Result<Vec<String>, String> + Send + Sync>;

/// How long a shrinking resize waits for the writes in flight past the new end.
const SHRINK_WAIT: Duration = Duration::from_secs(10);

/// The disks being served.
#[derive(Default)]
pub struct Host {
    disks: Mutex<Vec<Running>>,
    policy: Mutex<RunTimePolicy>,
    /// The configuration file's disks as last applied, and how to read it again.
    config: Mutex<(Vec<String>, Option<Reloader>)>,
    /// Sockets the process serves besides its disks' (shares, the control socket), with what
    /// they are: no disk may take their path.
    other_sockets: Mutex<Vec<(&'static str, PathBuf)>>,
    /// The shares being served (`host/shares.rs`).
    shares: Mutex<Vec<running_share::RunningShare>>,
    /// Where shares may be added at run time (`host/shares.rs`).
    share_roots: Mutex<Vec<ShareRoot>>,
    /// The NBD exports being served (`host/exports.rs`).
    exports: Mutex<Vec<exports::RunningExport>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn spec_error(key: &str, reason: String) -> HostError {
    HostError::Spec(SpecError {
        key: key.into(),
        reason,
    })
}

impl Host {
    /// An empty host.
    pub fn new() -> Self {
        Self::default()
    }

    /// `path` is served as `what` (a share, the control socket): no disk may be given it.
    pub fn reserve_socket(&self, what: &'static str, path: PathBuf) {
        lock(&self.other_sockets).push((what, path));
    }

    /// Every disk's socket, `spec`'s included, is its own: no two are the same path, and none is
    /// a share's or the control socket.
    fn check_sockets(
        disks: &[Running],
        spec: &DiskSpec,
        others: &Mutex<Vec<(&'static str, PathBuf)>>,
    ) -> Result<(), SpecError> {
        let mut all: Vec<DiskSpec> = disks.iter().map(|r| r.spec.clone()).collect();
        all.push(spec.clone());
        let others = lock(others);
        let others: Vec<(&str, &Path)> = others
            .iter()
            .map(|(what, path)| (*what, path.as_path()))
            .collect();
        check_sockets(&all, &[], &others)
    }

    /// What run-time disks may be from now on.
    pub fn set_policy(&self, policy: RunTimePolicy) {
        *lock(&self.policy) = policy;
    }

    /// Opens and binds a disk without serving it yet (start-up disks: before confinement).
    /// A disk with `socket-fd=` serves that inherited socket (the caller makes sure no two
    /// disks name one descriptor, and that it was inherited, not opened by the process).
    pub fn prepare(&self, text: &str, spec: DiskSpec) -> Result<Prepared, HostError> {
        let listener = match &spec.socket_fd {
            Some(name) => Some(adopt_inherited(name).map_err(|e| spec_error("socket-fd", e))?),
            None => None,
        };
        self.prepare_from(text, spec, Source::default(), listener)
    }

    fn prepare_from(
        &self,
        text: &str,
        spec: DiskSpec,
        source: Source,
        listener: Option<UnixListener>,
    ) -> Result<Prepared, HostError> {
        Self::check_sockets(&lock(&self.disks), &spec, &self.other_sockets)?;
        let kept = KeptFiles::of_source(&source);
        let confined = source.confined;
        let built = build_disk(&spec, source, listener)?;
        let image = match kept {
            Some(kept) => Some(kept),
            None if !confined => KeptFiles::reopen(&spec),
            None => None,
        };
        Ok(Prepared {
            text: text.to_string(),
            spec,
            built,
            image,
        })
    }

    /// Serves a prepared disk on its own thread.
    pub fn start(&self, prepared: Prepared) -> Result<DiskInfo, HostError> {
        let Prepared {
            text,
            spec,
            built,
            image,
        } = prepared;
        let Built {
            server,
            disk,
            handles,
            ..
        } = built;
        let mut disks = lock(&self.disks);
        // Checked again under the lock: two adds of one socket cannot both pass.
        Self::check_sockets(&disks, &spec, &self.other_sockets)?;
        let stopper = server
            .stopper()
            .map_err(|e| HostError::Start(format!("socket: {e}")))?;
        let running = Running {
            device: server.device(),
            current: server.current(),
            stats: server.queue_stats(),
            files: server.files(),
            image,
            text,
            spec,
            disk,
            handles,
            stopper,
            thread: None,
        };
        let info = info_of(&running);
        // An image resized by someone else (RBD): the guest is told, as after `resize`.
        let (device, current, socket) = (
            Arc::clone(&running.device),
            Arc::clone(&running.current),
            running.spec.socket.clone(),
        );
        running.disk.on_resize(Box::new(move |bytes| {
            device.set_capacity(bytes);
            if let Some(connection) = lock(&current).clone() {
                connection.config_changed();
            }
            crate::limited!(
                info,
                "{}: the storage is now {bytes} bytes",
                socket.display()
            );
        }));
        let thread = std::thread::Builder::new()
            .name("vbmq-socket".into())
            .spawn(move || server.run())
            .map_err(|e| HostError::Start(format!("cannot start a thread: {e}")))?;
        disks.push(Running {
            thread: Some(thread),
            ..running
        });
        Ok(info)
    }

    /// `add-disk`: parses `text` as `--disk` does, opens, binds and serves it.
    pub fn add_disk(&self, text: &str) -> Result<DiskInfo, HostError> {
        self.add_disk_passed(text, PassedDisk::default())
    }

    /// `remove-disk`: drains and closes its connection, stops its socket, removes its files.
    pub fn remove_disk(&self, socket: &Path) -> Result<(), HostError> {
        self.end_exports_of(socket);
        let mut running = {
            let mut disks = lock(&self.disks);
            let index = disks
                .iter()
                .position(|r| r.spec.socket == socket)
                .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
            disks.remove(index)
        };
        stop(&mut running);
        Ok(())
    }

    /// `resize`: gives the disk `bytes` (a file grows; `shrink` lets it shrink, losing what lay
    /// past the new end), and tells the connected frontend, whose guest sees the new capacity.
    pub fn resize(&self, socket: &Path, bytes: u64, shrink: bool) -> Result<DiskInfo, HostError> {
        let disks = lock(&self.disks);
        let running = disks
            .iter()
            .find(|r| r.spec.socket == socket)
            .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
        let before = running.device.capacity();
        resize_disk(
            &running.device,
            running.disk.as_ref(),
            bytes,
            shrink,
            SHRINK_WAIT,
        )
        .map_err(HostError::Resize)?;
        if let Some(connection) = lock(&running.current).clone() {
            connection.config_changed();
        }
        crate::limited!(
            info,
            "{}: resized from {before} to {} bytes",
            socket.display(),
            running.device.capacity()
        );
        resize_handover_siblings(&disks, running, shrink);
        Ok(info_of(running))
    }

    /// `snapshot`: writes the disk's contents at one instant into `to` while it serves (never
    /// into a file the process uses: see [`crate::held_files`]), and returns once `to` is complete and synced (see `crate::backend::SnapshotDisk`). Other
    /// requests are served meanwhile: the disk list is not held. `name`: a changed-block map
    /// begun at the snapshot's instant (`track-changes=on` disks).
    pub fn snapshot(
        &self,
        socket: &Path,
        to: File,
        name: Option<&str>,
    ) -> Result<SnapshotReport, HostError> {
        // Whatever name the client opened: a snapshot truncates its target.
        let used =
            crate::held_files::is_held(&to).map_err(|e| HostError::Snapshot(e.to_string()))?;
        if used {
            return Err(HostError::Snapshot(
                "the target is a file vbmq uses (an image, a map or a key file): refused".into(),
            ));
        }
        let (handles, device) = self.handles_and_device(socket)?;
        // A named snapshot begins a changed-block map first, then lets every write pushed
        // before it complete: each later write is in the map, each earlier one in the snapshot.
        let map = match name {
            Some(name) => {
                let map = handles
                    .changes()
                    .ok_or_else(|| HostError::NotTracked(socket.to_path_buf()))?;
                map.begin(name)?;
                if !device.writes.wait_for_older(SHRINK_WAIT) {
                    let _ = map.forget(name);
                    return Err(HostError::Snapshot(
                        "the writes in flight at the checkpoint did not complete within 10 s"
                            .into(),
                    ));
                }
                Some((map, name))
            }
            None => None,
        };
        let report = handles.snapshot(to).map_err(|e| {
            if let Some((map, name)) = map {
                let _ = map.forget(name);
            }
            HostError::Snapshot(e.to_string())
        })?;
        crate::limited!(
            info,
            "{}: snapshot of {} bytes by {} in {} ms",
            socket.display(),
            report.bytes,
            report.method.name(),
            report.duration.as_millis()
        );
        Ok(report)
    }

    /// The layers' verbs and the device of the disk on `socket`, without holding the disk list.
    fn handles_and_device(&self, socket: &Path) -> Result<(Handles, Arc<BlkDevice>), HostError> {
        let disks = lock(&self.disks);
        let running = disks
            .iter()
            .find(|r| r.spec.socket == socket)
            .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
        Ok((running.handles.clone(), Arc::clone(&running.device)))
    }

    /// `set-limits`: the disk's I/O limits from now on, across all its queues.
    pub fn set_limits(&self, socket: &Path, limits: Limits) -> Result<DiskInfo, HostError> {
        let disks = lock(&self.disks);
        let running = disks
            .iter()
            .find(|r| r.spec.socket == socket)
            .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
        running.device.limits.set(limits);
        crate::limited!(info, "{}: limits {limits:?}", socket.display());
        Ok(info_of(running))
    }

    /// Remembers the disks the configuration file gave (`texts`) and how to read it again.
    pub fn set_config(&self, texts: Vec<String>, reloader: Reloader) {
        *lock(&self.config) = (texts, Some(reloader));
    }

    /// `reload` (and SIGHUP): reads the configuration file again and applies the difference,
    /// checked whole first (see [`reload::plan`]): a file that cannot be read, a line that does
    /// not parse, a new disk this process cannot add, or a changed line that cannot change in
    /// place (unless `replace`) refuses the reload and changes nothing. Limit-only changes are
    /// applied to the running disk; new disks are added, then replaced ones removed and added,
    /// then removed ones go. Returns what was done.
    pub fn reload(&self, replace: bool) -> Result<Vec<String>, HostError> {
        let mut config = lock(&self.config);
        let Some(reloader) = config.1.as_ref() else {
            return Err(HostError::Start("no --config file to reload".into()));
        };
        let texts = reloader().map_err(HostError::Start)?;
        let mut new = Vec::new();
        for text in &texts {
            new.push((text.clone(), DiskSpec::parse(text, &online_cpus())?));
        }
        let specs: Vec<DiskSpec> = new.iter().map(|(_, spec)| spec.clone()).collect();
        {
            let others = lock(&self.other_sockets);
            let others: Vec<(&str, &Path)> = others
                .iter()
                .map(|(what, path)| (*what, path.as_path()))
                .collect();
            check_sockets(&specs, &[], &others)?;
        }
        let running: Vec<(PathBuf, String, DiskSpec)> = lock(&self.disks)
            .iter()
            .map(|r| (r.spec.socket.clone(), r.text.clone(), r.spec.clone()))
            .collect();
        let check_add = |spec: &DiskSpec| {
            self.check_run_time(spec, &PassedDisk::default())
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        // A file disk is served again from its own image (the same path, access mode and
        // O_DIRECT): a confined process cannot open it anew.
        let check_replace = |current: &DiskSpec, new: &DiskSpec| {
            self.check_run_time(new, &self.passed_again(current, new))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let plan = reload::plan(&running, &config.0, &new, replace, check_add, check_replace)
            .map_err(|e| HostError::Start(format!("reload refused, nothing changed: {e}")))?;
        let mut done = Vec::new();
        let mut added: Vec<PathBuf> = Vec::new();
        for (socket, text) in &plan.add {
            if let Err(e) = self.add_disk(text) {
                // Back to where it was: the disks added so far go again.
                for socket in &added {
                    let _ = self.remove_disk(socket);
                }
                return Err(HostError::Start(format!(
                    "reload refused, nothing changed: {}: {e}",
                    socket.display()
                )));
            }
            added.push(socket.clone());
            done.push(format!("added {}", socket.display()));
        }
        for (socket, limits, text) in &plan.limits {
            match self.set_limits(socket, *limits) {
                Ok(_) => {
                    self.retext(socket, text);
                    done.push(format!("limits of {} changed in place", socket.display()));
                }
                Err(e) => done.push(format!("{}: {e}", socket.display())),
            }
        }
        for (socket, text) in &plan.replace {
            let Some((_, old_text, current)) = running.iter().find(|(s, _, _)| s == socket) else {
                continue;
            };
            let Ok(new_spec) = DiskSpec::parse(text, &online_cpus()) else {
                continue;
            };
            let (again, back) = (
                self.passed_again(current, &new_spec),
                self.passed_again(current, current),
            );
            let _ = self.remove_disk(socket);
            match self.add_disk_passed(text, again) {
                Ok(_) => done.push(format!("replaced {}", socket.display())),
                // As it was, if it can be.
                Err(e) => match self.add_disk_passed(old_text, back) {
                    Ok(_) => done.push(format!("{}: kept as it was: {e}", socket.display())),
                    Err(_) => done.push(format!(
                        "removed {}, not added again: {e}",
                        socket.display()
                    )),
                },
            }
        }
        for socket in &plan.remove {
            match self.remove_disk(socket) {
                Ok(()) => done.push(format!("removed {}", socket.display())),
                Err(e) => done.push(format!("{}: {e}", socket.display())),
            }
        }
        config.0 = texts;
        if done.is_empty() {
            done.push("no change".into());
        }
        Ok(done)
    }

    /// The disk on `socket` is now described by `text` (its limits changed in place).
    fn retext(&self, socket: &Path, text: &str) {
        let Ok(spec) = DiskSpec::parse(text, &online_cpus()) else {
            return;
        };
        if let Some(running) = lock(&self.disks)
            .iter_mut()
            .find(|r| r.spec.socket == socket)
        {
            running.text = text.to_string();
            running.spec = spec;
        }
    }

    /// `list`: every disk, in the order added.
    pub fn list(&self) -> Vec<DiskInfo> {
        lock(&self.disks).iter().map(info_of).collect()
    }

    /// `stats`: every disk's and share's counters, or one device's.
    pub fn stats(&self, socket: Option<&Path>) -> Result<Vec<DiskCounters>, HostError> {
        let mut all: Vec<DiskCounters> = lock(&self.disks)
            .iter()
            .filter(|r| socket.is_none_or(|s| r.spec.socket == s))
            .map(|r| DiskCounters {
                socket: r.spec.socket.clone(),
                kind: DeviceKind::Disk,
                queues: r.stats.iter().map(|q| counters(q)).collect(),
                engine: r.disk.stats(),
            })
            .collect();
        all.extend(self.share_counters(socket));
        if let Some(socket) = socket
            && all.is_empty()
        {
            return Err(HostError::NoSuchDevice(socket.to_path_buf()));
        }
        Ok(all)
    }

    /// One line per disk and share for the log (SIGUSR1 and exit).
    pub fn report(&self) -> Vec<String> {
        let mut lines: Vec<String> = lock(&self.disks)
            .iter()
            .map(|r| {
                let mut line = format!("{}:", r.spec.socket.display());
                for (index, queue) in r.stats.iter().enumerate() {
                    line.push_str(&format!(" [queue {index}: {}]", queue.summary()));
                }
                for (name, value) in r.disk.stats() {
                    line.push_str(&format!(" {name}={value}"));
                }
                line
            })
            .collect();
        lines.extend(self.share_reports());
        lines
    }

    /// Stops every share, then every disk (at exit): in-flight I/O completes, files are
    /// removed.
    pub fn stop_all(&self) {
        self.stop_shares();
        let disks = std::mem::take(&mut *lock(&self.disks));
        for mut running in disks {
            stop(&mut running);
        }
    }
}

/// A disk opened and bound, not yet served.
pub struct Prepared {
    text: String,
    spec: DiskSpec,
    built: Built,
    image: Option<KeptFiles>,
}

impl Prepared {
    /// The files the disk keeps reading (a Ceph configuration and keyring).
    pub fn files(&self) -> &[PathBuf] {
        &self.built.files
    }

    /// The parsed spec.
    pub fn spec(&self) -> &DiskSpec {
        &self.spec
    }
}

fn stop(running: &mut Running) {
    let disk = &running.disk;
    running
        .stopper
        .stop_and_remove(running.thread.take(), || disk.close(), &running.files);
}

fn counters(q: &QueueStats) -> QueueCounters {
    let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    QueueCounters {
        ops: [
            load(&q.ops[0]),
            load(&q.ops[1]),
            load(&q.ops[2]),
            load(&q.ops[3]),
        ],
        in_flight: load(&q.in_flight),
        passes: load(&q.passes),
        busy_passes: load(&q.busy_passes),
        latency_buckets: std::array::from_fn(|i| load(&q.latency[i])),
        latency_ns: load(&q.latency_ns),
        unsupported: load(&q.unsupported),
        sleep_ns: load(&q.sleep_ns),
        latency_us: [500, 900, 990, 999].map(|per_mille| q.latency_quantile_us(per_mille)),
        requests: q.requests.load(Ordering::Relaxed),
        errors: q.errors.load(Ordering::Relaxed),
        read_bytes: q.read_bytes.load(Ordering::Relaxed),
        write_bytes: q.write_bytes.load(Ordering::Relaxed),
    }
}

fn info_of(r: &Running) -> DiskInfo {
    DiskInfo {
        socket: r.spec.socket.clone(),
        spec: r.text.clone(),
        size: r.disk.geometry().capacity,
        queues: r.spec.queues,
        connected: lock(&r.current).is_some(),
        limits: r.device.limits.limits(),
        checkpoints: changes::checkpoints_of(r.handles.changes()),
        mirror: r.handles.mirror().and_then(|m| m.state()),
    }
}

/// The other `handover=on` disks of this process on `resized`'s image (named by the same path)
/// take its new capacity: a live migration's destination, connecting later, must see the size
/// the guest has, and `list` the size the image has.
fn resize_handover_siblings(disks: &[Running], resized: &Running, shrink: bool) {
    let Storage::File(image) = &resized.spec.storage else {
        return;
    };
    let now = resized.device.capacity();
    let siblings = disks.iter().filter(|r| {
        r.spec.handover
            && resized.spec.handover
            && r.spec.socket != resized.spec.socket
            && matches!(&r.spec.storage, Storage::File(path) if path == image)
    });
    for sibling in siblings {
        match resize_disk(
            &sibling.device,
            sibling.disk.as_ref(),
            now,
            shrink,
            SHRINK_WAIT,
        ) {
            Ok(_) => {
                if let Some(connection) = lock(&sibling.current).clone() {
                    connection.config_changed();
                }
            }
            Err(e) => crate::limited!(
                warn,
                "{}: not resized with {}, which shares its image: {e}",
                sibling.spec.socket.display(),
                resized.spec.socket.display()
            ),
        }
    }
}
