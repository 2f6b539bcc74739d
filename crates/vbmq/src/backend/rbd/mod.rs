//! Ceph RBD images, through librbd.
//!
//! One image handle per disk, shared by its queues: librbd is thread-safe, and a second handle
//! in the same process would be a second client of the image's exclusive lock, the two
//! handing it back and forth on every write. Each queue's [`RbdEngine`] routes its own
//! completions back to itself (see `engine.rs`).

mod engine;
mod ffi;

use std::ffi::{CString, c_void};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tracing::{error, info};

use super::{Disk, Engine, EngineOptions, Geometry};
use engine::RbdEngine;

/// Where an RBD image is and how to reach its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbdTarget {
    /// The pool.
    pub pool: String,
    /// The namespace in the pool; empty for the default one.
    pub namespace: String,
    /// The image.
    pub image: String,
    /// The Ceph configuration file (monitors, keyring path, options).
    pub conf: PathBuf,
    /// The Ceph user, without `client.`.
    pub user: String,
    /// Monitor and OSD operation timeout: an operation the cluster does not answer in this
    /// time fails instead of waiting for it.
    pub timeout: Duration,
}

impl RbdTarget {
    /// Parses `POOL/IMAGE` or `POOL/NAMESPACE/IMAGE`; `None` if a part is empty or missing.
    pub fn parse_name(name: &str) -> Option<(String, String, String)> {
        let parts: Vec<&str> = name.split('/').collect();
        if parts
            .iter()
            .any(|part| part.is_empty() || part.contains('\0'))
        {
            return None;
        }
        match parts.as_slice() {
            [pool, image] => Some((pool.to_string(), String::new(), image.to_string())),
            [pool, ns, image] => Some((pool.to_string(), ns.to_string(), image.to_string())),
            _ => None,
        }
    }
}

/// A connection to a cluster as one user, shared by every image opened through it. Made at
/// start (librados connects to the monitors over TCP and reads the configuration and keyring,
/// which the confinement allows only then), it stays for the process's lifetime: an `rbd=`
/// disk added at run time on the same cluster, user and timeout reuses it (see
/// [`RbdDisk::open_connected`]) and needs nothing the confined process may not do.
struct Cluster {
    api: &'static ffi::Api,
    handle: ffi::Rados,
    /// The configuration file, the user and the timeout it was made with.
    key: (PathBuf, String, Duration),
    /// The files librados read: the configuration and the keyrings found.
    files: Vec<PathBuf>,
}

// SAFETY: a librados cluster handle may be used from any thread, concurrently.
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: a handle made by `rados_create2`, shut down once, after every image opened
        // through it is closed (each holds the `Arc`).
        unsafe { (self.api.rados_shutdown)(self.handle) };
    }
}

/// The connections made so far, kept until [`release_clusters`].
static CLUSTERS: Mutex<Vec<Arc<Cluster>>> = Mutex::new(Vec::new());

fn cluster_key(target: &RbdTarget) -> (PathBuf, String, Duration) {
    (target.conf.clone(), target.user.clone(), target.timeout)
}

/// The connection to `target`'s cluster made earlier, if any.
fn connected(target: &RbdTarget) -> Option<Arc<Cluster>> {
    let key = cluster_key(target);
    CLUSTERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|c| c.key == key)
        .cloned()
}

/// Whether an `rbd=` disk on `target` could be opened without a new cluster connection.
pub fn cluster_connected(target: &RbdTarget) -> bool {
    connected(target).is_some()
}

/// Lets go of every cluster connection (at exit, once every disk is closed).
pub fn release_clusters() {
    std::mem::take(&mut *CLUSTERS.lock().unwrap_or_else(|p| p.into_inner()));
}

/// Makes a new connection to `target`'s cluster and keeps it.
fn connect(api: &'static ffi::Api, target: &RbdTarget) -> io::Result<Arc<Cluster>> {
    let user = cstring("ceph-user", &target.user)?;
    let conf = cstring("ceph-conf", &path_str(&target.conf)?)?;
    let timeout = cstring("timeout", &target.timeout.as_secs().max(1).to_string())?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings; `handle` receives a new handle.
    ffi::check(unsafe {
        (api.rados_create2)(&mut handle, c"ceph".as_ptr(), user_name(&user).as_ptr(), 0)
    })
    .map_err(context("rados_create2"))?;
    // From here on the handle is shut down by `Cluster`'s drop, even on error.
    let mut cluster = Cluster {
        api,
        handle,
        key: cluster_key(target),
        files: Vec::new(),
    };
    let set = |key: &std::ffi::CStr, value: &std::ffi::CStr| {
        // SAFETY: an unconnected cluster handle and NUL-terminated strings.
        ffi::check(unsafe { (api.rados_conf_set)(handle, key.as_ptr(), value.as_ptr()) })
            .map(drop)
            .map_err(context(&key.to_string_lossy()))
    };
    // SAFETY: as above.
    ffi::check(unsafe { (api.rados_conf_read_file)(handle, conf.as_ptr()) })
        .map_err(context(&format!("reading {}", target.conf.display())))?;
    set(c"rados_osd_op_timeout", &timeout)?;
    set(c"rados_mon_op_timeout", &timeout)?;
    set(c"client_mount_timeout", &timeout)?;
    // Write-through: a completed write is on the OSDs, as with O_DIRECT on a file.
    set(c"rbd_cache", c"false")?;
    // No admin socket: it would be a socket file that confinement cannot account for.
    set(c"admin_socket", c"")?;
    let keyrings = conf_get(api, handle, c"keyring");
    // SAFETY: a configured cluster handle.
    ffi::check(unsafe { (api.rados_connect)(handle) }).map_err(context("connecting"))?;
    cluster.files = std::iter::once(target.conf.clone())
        .chain(keyrings.split([',', ';', ' ', '\t']).filter_map(|path| {
            let path = Path::new(path);
            (path.is_absolute() && path.is_file()).then(|| path.to_path_buf())
        }))
        .collect();
    let cluster = Arc::new(cluster);
    CLUSTERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Arc::clone(&cluster));
    Ok(cluster)
}

/// An open image and its pool context, closed together; the cluster connection it was opened
/// through outlives it.
struct Image {
    api: &'static ffi::Api,
    /// Held: the connection stays while the image is open.
    _cluster: Arc<Cluster>,
    ioctx: ffi::IoCtx,
    /// Null once closed (at exit).
    handle: AtomicPtr<c_void>,
    watch: Option<u64>,
    /// Set by the update watch, for the next stats report.
    header_changed: Arc<AtomicBool>,
    /// Whether a failed operation was logged already (the cause is logged once).
    failure_logged: AtomicBool,
    label: String,
}

// SAFETY: librbd and librados handles may be used from any thread, concurrently.
unsafe impl Send for Image {}
// SAFETY: as above; every call through `&Image` is one of librbd's thread-safe calls.
unsafe impl Sync for Image {}

impl Image {
    /// Logs the first failure of an operation, with its cause; later ones only count as errors.
    fn log_failure(&self, ret: i32) {
        if !self.failure_logged.swap(true, Ordering::Relaxed) {
            error!(
                "rbd {}: an operation failed: {} (further failures are not logged)",
                self.label,
                io::Error::from_raw_os_error(-ret)
            );
        }
    }

    /// The open image; null once closed.
    fn handle(&self) -> ffi::Image {
        self.handle.load(Ordering::Acquire)
    }

    fn size(&self) -> io::Result<u64> {
        let handle = self.handle();
        if handle.is_null() {
            return Err(io::Error::from_raw_os_error(libc::ESHUTDOWN));
        }
        let mut size = 0;
        // SAFETY: an open image and a valid out pointer.
        ffi::check(unsafe { (self.api.rbd_get_size)(handle, &mut size) })?;
        Ok(size)
    }

    /// Stops the watch and closes the image, releasing its exclusive lock. Idempotent.
    fn close(&self) {
        let handle = self.handle.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if handle.is_null() {
            return;
        }
        // SAFETY: the image was open and is closed once (the swap above); the watch was
        // registered on it. Its argument is freed only in `drop`.
        unsafe {
            if let Some(watch) = self.watch {
                (self.api.rbd_update_unwatch)(handle, watch);
            }
            (self.api.rbd_close)(handle);
        }
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        self.close();
        // SAFETY: the pool context was opened by `RbdDisk::open` and is closed once, after the
        // image; a null one was never opened. The cluster goes with the last `Arc`.
        unsafe {
            if !self.ioctx.is_null() {
                (self.api.rados_ioctx_destroy)(self.ioctx);
            }
        }
        // The watch's argument is freed only now that librbd can no longer call it.
        if self.watch.is_some() {
            // SAFETY: the pointer from `Arc::into_raw` given to rbd_update_watch.
            drop(unsafe { Arc::from_raw(Arc::as_ptr(&self.header_changed)) });
        }
    }
}

/// librbd's update callback: the image header changed (a resize, a snapshot, features).
///
/// # Safety
/// `arg` is the `Arc<AtomicBool>` pointer registered with the watch, alive until unwatched.
unsafe extern "C" fn on_header_update(arg: *mut c_void) {
    // SAFETY: per the contract; only borrowed.
    let changed = unsafe { &*arg.cast_const().cast::<AtomicBool>() };
    changed.store(true, Ordering::Release);
}

/// Who is told of a new capacity (the device and its connection).
type ResizeListener = Box<dyn Fn(u64) + Send + Sync>;

/// How often the watcher looks at the flag the update callback sets (the callback runs on a
/// librbd thread, where calling back into librbd for the size is not safe).
const WATCH_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);

/// Follows the image's size: after a header update, reads it and, when it changed, tells the
/// listener. Holds the image only while it looks (the disk and its engines own it: when they
/// are gone it is closed and shut down at once, and the watcher ends).
fn watch_size(
    image: &Weak<Image>,
    capacity: &AtomicU64,
    listener: &Mutex<Option<ResizeListener>>,
    seen: &AtomicU64,
) {
    loop {
        std::thread::sleep(WATCH_PERIOD);
        let Some(image) = image.upgrade() else {
            return;
        };
        if image.handle().is_null() {
            return;
        }
        if !image.header_changed.swap(false, Ordering::AcqRel) {
            continue;
        }
        seen.fetch_add(1, Ordering::Relaxed);
        let Ok(size) = image.size() else {
            continue;
        };
        // The guest addresses 512-byte sectors.
        let size = size - size % 512;
        if capacity.swap(size, Ordering::AcqRel) == size {
            continue;
        }
        info!("rbd {}: the image is now {size} bytes", image.label);
        if let Some(listener) = listener.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            listener(size);
        }
    }
}

/// A disk on an RBD image.
pub struct RbdDisk {
    image: Arc<Image>,
    /// The image's size, followed by the watcher thread.
    capacity: Arc<AtomicU64>,
    readonly: bool,
    /// Header updates seen (resizes, snapshots, ...).
    resizes_seen: Arc<AtomicU64>,
    listener: Arc<Mutex<Option<ResizeListener>>>,
    files: Vec<PathBuf>,
}

fn cstring(what: &str, value: &str) -> io::Result<CString> {
    CString::new(value).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} holds a NUL byte"),
        )
    })
}

fn context(what: &str) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl RbdDisk {
    /// Opens the image through the connection to the cluster `target.conf` names as
    /// `client.USER`, made now if there is none yet.
    pub fn open(target: &RbdTarget, readonly: bool) -> io::Result<Self> {
        let api = ffi::api()?;
        let cluster = match connected(target) {
            Some(cluster) => cluster,
            None => connect(api, target)?,
        };
        Self::open_on(api, cluster, target, readonly)
    }

    /// Opens the image through a connection made earlier (at start), refused if there is none:
    /// what a confined process can do (no new connection to the monitors, no file read).
    pub fn open_connected(target: &RbdTarget, readonly: bool) -> io::Result<Self> {
        let api = ffi::api()?;
        let cluster = connected(target).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "no connection to this cluster (ceph-conf=, ceph-user=, ceph-timeout=) was made \
                 at start",
            )
        })?;
        Self::open_on(api, cluster, target, readonly)
    }

    fn open_on(
        api: &'static ffi::Api,
        cluster: Arc<Cluster>,
        target: &RbdTarget,
        readonly: bool,
    ) -> io::Result<Self> {
        let pool = cstring("pool", &target.pool)?;
        let namespace = cstring("namespace", &target.namespace)?;
        let name = cstring("image", &target.image)?;
        let handle_of_cluster = cluster.handle;
        let files = cluster.files.clone();
        // From here on the handles are closed by `Image`'s drop, even on error.
        let mut image = Image {
            api,
            _cluster: cluster,
            ioctx: std::ptr::null_mut(),
            handle: AtomicPtr::new(std::ptr::null_mut()),
            watch: None,
            header_changed: Arc::new(AtomicBool::new(false)),
            failure_logged: AtomicBool::new(false),
            label: format!("{}/{}", target.pool, target.image),
        };
        let cluster = handle_of_cluster;
        let mut ioctx = std::ptr::null_mut();
        // SAFETY: a connected cluster; `ioctx` receives a new handle.
        ffi::check(unsafe { (api.rados_ioctx_create)(cluster, pool.as_ptr(), &mut ioctx) })
            .map_err(context(&format!("pool {}", target.pool)))?;
        image.ioctx = ioctx;
        // SAFETY: an open pool context and a NUL-terminated namespace ("" is the default).
        unsafe { (api.rados_ioctx_set_namespace)(ioctx, namespace.as_ptr()) };
        let open = if readonly {
            api.rbd_open_read_only
        } else {
            api.rbd_open
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: an open pool context; `handle` receives the image; no snapshot.
        ffi::check(unsafe { open(ioctx, name.as_ptr(), &mut handle, std::ptr::null()) })
            .map_err(context(&format!("image {}", image.label)))?;
        image.handle = AtomicPtr::new(handle);
        let capacity = image.size()?;
        let mut watch = 0;
        let arg = Arc::into_raw(Arc::clone(&image.header_changed))
            .cast_mut()
            .cast::<c_void>();
        // SAFETY: an open image; `arg` stays valid until `Image::drop` unwatches and frees it.
        let ret = unsafe { (api.rbd_update_watch)(handle, &mut watch, on_header_update, arg) };
        if ret < 0 {
            // SAFETY: the watch was refused: take the reference back.
            drop(unsafe { Arc::from_raw(arg.cast_const().cast::<AtomicBool>()) });
            return Err(io::Error::from_raw_os_error(-ret)).map_err(context("rbd_update_watch"));
        }
        image.watch = Some(watch);
        info!("rbd {}: {capacity} bytes", image.label);
        let image = Arc::new(image);
        // The guest addresses 512-byte sectors.
        let capacity = Arc::new(AtomicU64::new(capacity - capacity % 512));
        let resizes_seen = Arc::new(AtomicU64::new(0));
        let listener: Arc<Mutex<Option<ResizeListener>>> = Arc::new(Mutex::new(None));
        let watcher = (
            Arc::downgrade(&image),
            capacity.clone(),
            listener.clone(),
            resizes_seen.clone(),
        );
        std::thread::Builder::new()
            .name("vbmq-rbd-watch".into())
            .spawn(move || watch_size(&watcher.0, &watcher.1, &watcher.2, &watcher.3))
            .map_err(context("starting the size watcher"))?;
        Ok(RbdDisk {
            image,
            capacity,
            readonly,
            resizes_seen,
            listener,
            files,
        })
    }

    /// The files librados reads: the configuration and the keyrings found, for confinement.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

/// A configuration value with its metavariables (`$cluster`, `$name`) expanded; empty if unset.
fn conf_get(api: &ffi::Api, cluster: ffi::Rados, key: &std::ffi::CStr) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: a configured cluster handle; librados writes at most `buf.len()` bytes.
    let ret =
        unsafe { (api.rados_conf_get)(cluster, key.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if ret < 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// `client.USER` is what `rados_create2` wants as a full name.
fn user_name(user: &CString) -> CString {
    let mut name = b"client.".to_vec();
    name.extend_from_slice(user.as_bytes());
    // No NUL: `user` had none.
    CString::new(name).unwrap_or_default()
}

fn path_str(path: &Path) -> io::Result<String> {
    path.to_str().map(str::to_string).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not UTF-8", path.display()),
        )
    })
}

impl Disk for RbdDisk {
    fn geometry(&self) -> Geometry {
        Geometry {
            capacity: self.capacity.load(Ordering::Acquire),
            block_size: 512,
            physical_block_exp: 0,
        }
    }

    fn on_resize(&self, listener: ResizeListener) {
        *self.listener.lock().unwrap_or_else(|p| p.into_inner()) = Some(listener);
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        Ok(Box::new(RbdEngine::new(Arc::clone(&self.image), options)?))
    }

    fn supports_discard(&self) -> bool {
        !self.readonly
    }

    fn close(&self) {
        self.image.close();
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        vec![(
            "rbd_header_updates",
            self.resizes_seen.load(Ordering::Relaxed),
        )]
    }
}
