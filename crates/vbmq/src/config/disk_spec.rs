//! One `--disk` argument: `socket=PATH,path=FILE,queues=4,mode=poll,cpus=2-5,...`.

use std::path::PathBuf;
use std::time::Duration;

use super::limit_keys::set_limit;
pub(super) use super::on_off::on_off;
use super::spec_error::{SpecError, bad};
use super::{LayerSpec, disk_key, parse_cpu_list, parse_size};
use crate::backend::{ImageFormat, RbdTarget};
use crate::limits::Limits;
use crate::nbd::uri::NbdUri;
use crate::worker::WaitMode;

/// Largest number of virtqueues a disk may have.
pub const MAX_QUEUES: usize = 64;
/// Largest virtqueue size a disk may offer.
pub const MAX_QUEUE_SIZE: u16 = 1024;

/// What stores the disk's blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Storage {
    /// A raw image file or a block device.
    File(PathBuf),
    /// A device of this many bytes that stores nothing: reads give zeros, writes are dropped.
    Null(u64),
    /// A volatile disk of `size` bytes in host memory, optionally loaded from a raw image.
    Memory {
        /// Bytes.
        size: u64,
        /// A raw image loaded at start.
        image: Option<PathBuf>,
    },
    /// A Ceph RBD image.
    Rbd(RbdTarget),
}

/// A parsed and validated `--disk` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSpec {
    /// The vhost-user socket.
    pub socket: PathBuf,
    /// What stores the blocks.
    pub storage: Storage,
    /// `format=`: how `path=` is read (raw or qcow2).
    pub format: ImageFormat,
    /// Number of virtqueues.
    pub queues: usize,
    /// Largest virtqueue size offered.
    pub queue_size: u16,
    /// How the queue threads wait.
    pub mode: WaitMode,
    /// Adaptive mode: microseconds of polling after the last request.
    pub poll_us: u64,
    /// CPU of each queue's thread (thread i on `cpus[i]`); empty: not pinned.
    pub cpus: Vec<usize>,
    /// Offer `VIRTIO_BLK_F_RO` and refuse writes.
    pub readonly: bool,
    /// Open files with `O_DIRECT`.
    pub direct: bool,
    /// Lock the image against other processes (`lock=`).
    pub lock: bool,
    /// Share a writable image with another `handover=on` disk of this process (`handover=`).
    pub handover: bool,
    /// I/O limits (`iops=`, `bps=`, ...).
    pub limits: Limits,
    /// Offer in-flight tracking (`VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD`, `inflight=`).
    pub inflight: bool,
    /// The layers whose keys [`LayerSpec::set_key`] parses (`discard=off`), in the order given.
    pub keyed_layers: Vec<LayerSpec>,
    /// Fault injection: hold chosen completions this long (`delay-us=`; 0: none).
    pub delay_us: u64,
    /// Fault injection: which requests are held (every Nth of a queue, `delay-every=`).
    pub delay_every: u64,
    /// The GET_ID serial.
    pub serial: Option<String>,
    /// Submit each request with its own system call (an ablation for the benchmark only).
    pub batch: bool,
    /// Every read and write through io_uring, even on files whose reads would be handed to
    /// kernel workers (`io=ring`; default `io=auto`).
    pub ring_only: bool,
    /// io_uring submission by a kernel thread polling on this CPU (`sqpoll=CPU`; `None`: off).
    pub sqpoll: Option<usize>,
    /// The guest's memory registered with each queue's io_uring (`fixed-buffers=on`).
    pub fixed_buffers: bool,
    /// Permission bits of the socket file.
    pub socket_mode: u32,
    /// Group owning the socket file (`socket-group=NAME|GID`); the process's own if `None`.
    pub socket_group: Option<u32>,
    /// An inherited listening socket to serve instead of binding `socket` (`socket-fd=N|NAME`:
    /// a descriptor number, or a name in systemd's `LISTEN_FDNAMES`); at start only.
    pub socket_fd: Option<String>,
    /// Bytes of host DRAM read cache in front of a `path=` disk (`cache=`; 0: none).
    pub cache: u64,
    /// Fill the cache from the start of the file before serving (`cache-preload=on`).
    pub cache_preload: bool,
    /// The read-only image a `path=` disk is a thin copy of (`base=`).
    pub base: Option<PathBuf>,
    /// `base=nbd+unix:///NAME?socket=PATH`: the base is that NBD export (`base` holds the URI).
    pub base_nbd: Option<NbdUri>,
    /// Seconds a read of an NBD base waits for a lost connection (`base-timeout=`).
    pub base_timeout: Option<u64>,
    /// Bytes per thin-disk block (`base-block=`; `None`: the map's, or 64 KiB).
    pub base_block: Option<u64>,
    /// Copy blocks read from the base into the disk (`base-copy-on-read=on`).
    pub base_copy_on_read: bool,
    /// Copy every block from the base in the background (`base-fill=on`).
    pub base_fill: bool,
    /// The file holding the AES-XTS key of an encrypted disk (`encrypt=aes-xts,key-file=`).
    pub key_file: Option<PathBuf>,
    /// An encrypted disk passes discards to its image (`encrypt-discard=on`), which then shows
    /// which ranges are unused.
    pub encrypt_discard: bool,
    /// Record changed blocks in named maps, in `DISK.changes` (`track-changes=on`).
    pub track_changes: bool,
    /// Bytes per tracked block (`track-block=`; `None`: the map file's, or 64 KiB).
    pub track_block: Option<u64>,
}

/// The GID of group `name` in /etc/group.
fn group_id(name: &str) -> Option<u32> {
    let groups = std::fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == name).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

/// `queues=`: 1..=[`MAX_QUEUES`].
pub(super) fn queues(key: &str, value: &str) -> Result<usize, SpecError> {
    value
        .parse()
        .ok()
        .filter(|n| (1..=MAX_QUEUES).contains(n))
        .ok_or_else(|| bad(key, format!("must be 1..={MAX_QUEUES}")))
}

/// `queue-size=`: a power of two up to [`MAX_QUEUE_SIZE`].
pub(super) fn queue_size(key: &str, value: &str) -> Result<u16, SpecError> {
    value
        .parse::<u16>()
        .ok()
        .filter(|n| n.is_power_of_two() && *n >= 2 && *n <= MAX_QUEUE_SIZE)
        .ok_or_else(|| bad(key, format!("must be a power of two, 2..={MAX_QUEUE_SIZE}")))
}

/// `mode=`.
pub(super) fn wait_mode(key: &str, value: &str) -> Result<WaitMode, SpecError> {
    match value {
        "event" => Ok(WaitMode::Event),
        "poll" => Ok(WaitMode::Poll),
        "adaptive" => Ok(WaitMode::Adaptive),
        _ => Err(bad(key, "must be event, poll or adaptive")),
    }
}

/// `poll-us=`.
pub(super) fn poll_us(key: &str, value: &str) -> Result<u64, SpecError> {
    value
        .parse()
        .ok()
        .filter(|us| *us <= 1_000_000)
        .ok_or_else(|| bad(key, "must be 0..=1000000 microseconds"))
}

/// `cpus=`: CPUs this process may run on.
pub(super) fn cpus(key: &str, value: &str, online_cpus: &[usize]) -> Result<Vec<usize>, SpecError> {
    let cpus = parse_cpu_list(value)
        .ok_or_else(|| bad(key, format!("{value:?} is not a list like 2-5 or 2,4")))?;
    if let Some(cpu) = cpus.iter().find(|cpu| !online_cpus.contains(cpu)) {
        return Err(bad(
            key,
            format!("CPU {cpu} does not exist or is not allowed"),
        ));
    }
    Ok(cpus)
}

/// `cpus=` against the queues it pins: one CPU per queue, and a spinning thread (`mode=poll`)
/// must be told which CPU it owns.
pub(super) fn check_cpus(cpus: &[usize], queues: usize, mode: WaitMode) -> Result<(), SpecError> {
    if !cpus.is_empty() && cpus.len() < queues {
        return Err(bad(
            "cpus",
            format!("{} CPUs for {queues} queues", cpus.len()),
        ));
    }
    if mode == WaitMode::Poll && cpus.is_empty() {
        return Err(bad("cpus", "required with mode=poll"));
    }
    Ok(())
}

/// `socket-group=`: a group name or GID.
pub(super) fn socket_group(key: &str, value: &str) -> Result<u32, SpecError> {
    let gid = value.parse().ok().or_else(|| group_id(value));
    gid.ok_or_else(|| {
        bad(
            key,
            format!("{value:?} is neither a group of /etc/group nor a GID"),
        )
    })
}

/// `socket-mode=`: octal permission bits.
pub(super) fn socket_mode(key: &str, value: &str) -> Result<u32, SpecError> {
    u32::from_str_radix(value, 8)
        .ok()
        .filter(|mode| *mode <= 0o777)
        .ok_or_else(|| bad(key, "must be octal permission bits such as 0660"))
}

/// What `--disk` gives that is checked against other keys once all are read.
#[derive(Default)]
struct Given {
    socket: Option<PathBuf>,
    storage: Option<Storage>,
    image: Option<PathBuf>,
    encrypt: bool,
    ceph_conf: Option<PathBuf>,
    ceph_user: Option<String>,
    ceph_timeout: Option<u64>,
}

impl Given {
    /// The socket, the storage and its own keys: whether `key` is one of them.
    fn set(&mut self, key: &str, value: &str) -> Result<bool, SpecError> {
        match key {
            "socket" => self.socket = Some(PathBuf::from(value)),
            "path" | "null" | "mem" | "rbd" if self.storage.is_some() => {
                return Err(bad(key, "give only one of path=, null=, mem= and rbd="));
            }
            "path" => self.storage = Some(Storage::File(PathBuf::from(value))),
            "null" => {
                let size = parse_size(value).filter(|size| *size > 0 && size % 512 == 0);
                let size = size.ok_or_else(|| {
                    bad(key, format!("{value:?} is not a size such as 8G or 512M"))
                })?;
                self.storage = Some(Storage::Null(size));
            }
            "mem" => {
                let size = parse_size(value).filter(|size| *size > 0 && size % 512 == 0);
                let size = size.ok_or_else(|| {
                    bad(key, format!("{value:?} is not a size such as 4G or 512M"))
                })?;
                self.storage = Some(Storage::Memory { size, image: None });
            }
            "rbd" => {
                let (pool, namespace, image) = RbdTarget::parse_name(value)
                    .ok_or_else(|| bad(key, "expected POOL/IMAGE or POOL/NAMESPACE/IMAGE"))?;
                self.storage = Some(Storage::Rbd(RbdTarget {
                    pool,
                    namespace,
                    image,
                    conf: PathBuf::from("/etc/ceph/ceph.conf"),
                    user: "admin".into(),
                    timeout: Duration::from_secs(30),
                }));
            }
            "ceph-conf" => self.ceph_conf = Some(PathBuf::from(value)),
            "ceph-user" => {
                if value.is_empty() || value.contains('\0') {
                    return Err(bad(key, "a Ceph user name such as admin"));
                }
                self.ceph_user = Some(value.to_string());
            }
            "ceph-timeout" => {
                let secs = value.parse::<u64>().ok().filter(|s| (1..=3600).contains(s));
                self.ceph_timeout = Some(secs.ok_or_else(|| bad(key, "must be 1..=3600 seconds"))?);
            }
            "image" => self.image = Some(PathBuf::from(value)),
            "encrypt" => {
                self.encrypt = match value {
                    "aes-xts" => true,
                    "off" => false,
                    _ => return Err(bad(key, "aes-xts or off")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

impl DiskSpec {
    /// Parses one `--disk` value. `online_cpus` are the CPUs this process may run on.
    ///
    /// ```
    /// use vbmq::config::{DiskSpec, Storage};
    /// use vbmq::worker::WaitMode;
    ///
    /// let spec = DiskSpec::parse("socket=/run/vm1.sock,null=8G,queues=2,mode=poll,cpus=2,3", &[0, 1, 2, 3])?;
    /// assert_eq!(spec.storage, Storage::Null(8 << 30));
    /// assert_eq!((spec.queues, spec.mode, spec.cpus), (2, WaitMode::Poll, vec![2, 3]));
    ///
    /// // An error names the key at fault.
    /// let err = DiskSpec::parse("socket=/s,null=8G,queues=0", &[0]).unwrap_err();
    /// assert_eq!(err.to_string(), "--disk queues: must be 1..=64");
    /// # Ok::<(), vbmq::config::SpecError>(())
    /// ```
    pub fn parse(text: &str, online_cpus: &[usize]) -> Result<Self, SpecError> {
        let mut spec = DiskSpec::defaults();
        let mut given = Given::default();
        for (key, value) in Self::pairs(text)? {
            let value = value.as_str();
            if disk_key(key).is_none() {
                return Err(bad(key, "unknown key (vbmq serve --help lists them)"));
            }
            if !given.set(key, value)?
                && !spec.set_layer_key(key, value)?
                && !spec.set_device_key(key, value, online_cpus)?
            {
                return Err(bad(key, "listed but not parsed: a defect"));
            }
        }
        let encrypt = given.encrypt;
        spec.take_given(given)?;
        spec.check_storage_keys()?;
        spec.check_base()?;
        spec.check_track_changes()?;
        spec.check_encrypt(encrypt)?;
        check_cpus(&spec.cpus, spec.queues, spec.mode)?;
        Ok(spec)
    }

    /// Every key's default.
    fn defaults() -> Self {
        DiskSpec {
            socket: PathBuf::new(),
            storage: Storage::Null(0),
            format: ImageFormat::Auto,
            queues: 1,
            queue_size: 256,
            mode: WaitMode::Adaptive,
            poll_us: 50,
            cpus: Vec::new(),
            readonly: false,
            direct: true,
            lock: true,
            handover: false,
            serial: None,
            batch: true,
            ring_only: false,
            sqpoll: None,
            fixed_buffers: false,
            socket_mode: 0o600,
            socket_group: None,
            socket_fd: None,
            cache: 0,
            cache_preload: false,
            base: None,
            base_nbd: None,
            base_timeout: None,
            base_block: None,
            base_copy_on_read: false,
            base_fill: false,
            key_file: None,
            encrypt_discard: false,
            track_changes: false,
            track_block: None,
            limits: Limits::default(),
            inflight: true,
            keyed_layers: Vec::new(),
            delay_us: 0,
            delay_every: 16,
        }
    }

    /// A key of a layer (`cache=`, `base=`, `track-changes=`, `key-file=`, `delay-us=`...):
    /// whether it is one.
    fn set_layer_key(&mut self, key: &str, value: &str) -> Result<bool, SpecError> {
        match key {
            "cache" => {
                self.cache = parse_size(value).filter(|size| *size > 0).ok_or_else(|| {
                    bad(key, format!("{value:?} is not a size such as 2G or 512M"))
                })?;
            }
            "cache-preload" => self.cache_preload = on_off(key, value)?,
            "base" => {
                // A URI names an NBD export; anything else is a file's path.
                self.base_nbd = if value.contains("://") {
                    Some(
                        value
                            .parse()
                            .map_err(|e: crate::nbd::uri::UriError| bad(key, e.to_string()))?,
                    )
                } else {
                    None
                };
                self.base = Some(PathBuf::from(value));
            }
            "base-timeout" => {
                let secs = value.parse().ok().filter(|s| (1..=3600).contains(s));
                self.base_timeout = Some(secs.ok_or_else(|| bad(key, "must be 1..=3600 seconds"))?);
            }
            "base-block" => {
                let size = parse_size(value)
                    .filter(|s| s.is_power_of_two() && (4096..=16 << 20).contains(s));
                self.base_block = Some(
                    size.ok_or_else(|| bad(key, "a power of two from 4K to 16M, such as 64K"))?,
                );
            }
            "base-copy-on-read" => self.base_copy_on_read = on_off(key, value)?,
            "base-fill" => self.base_fill = on_off(key, value)?,
            "track-changes" => self.track_changes = on_off(key, value)?,
            "track-block" => {
                let size = parse_size(value)
                    .filter(|s| s.is_power_of_two() && (4096..=16 << 20).contains(s));
                self.track_block = Some(
                    size.ok_or_else(|| bad(key, "a power of two from 4K to 16M, such as 64K"))?,
                );
            }
            "key-file" => self.key_file = Some(PathBuf::from(value)),
            "encrypt-discard" => self.encrypt_discard = on_off(key, value)?,
            "delay-us" => {
                let us = value.parse::<u64>().ok().filter(|us| *us <= 60_000_000);
                self.delay_us = us.ok_or_else(|| bad(key, "must be 0..=60000000"))?;
            }
            "delay-every" => {
                let n = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| (1..=1 << 20).contains(n));
                self.delay_every = n.ok_or_else(|| bad(key, "must be 1..=1048576"))?;
            }
            _ => return LayerSpec::set_key(&mut self.keyed_layers, key, value),
        }
        Ok(true)
    }

    /// A key of the device, its queues, its socket or its storage's options: whether it is
    /// one.
    fn set_device_key(
        &mut self,
        key: &str,
        value: &str,
        online_cpus: &[usize],
    ) -> Result<bool, SpecError> {
        match key {
            "inflight" => self.inflight = on_off(key, value)?,
            "format" => {
                self.format = ImageFormat::parse(value)
                    .ok_or_else(|| bad(key, "one of auto, raw and qcow2"))?;
            }
            "queues" => self.queues = queues(key, value)?,
            "queue-size" => self.queue_size = queue_size(key, value)?,
            "mode" => self.mode = wait_mode(key, value)?,
            "poll-us" => self.poll_us = poll_us(key, value)?,
            "cpus" => self.cpus = cpus(key, value, online_cpus)?,
            "readonly" => self.readonly = on_off(key, value)?,
            "direct" => self.direct = on_off(key, value)?,
            "lock" => self.lock = on_off(key, value)?,
            "handover" => self.handover = on_off(key, value)?,
            "batch" => self.batch = on_off(key, value)?,
            "io" => {
                self.ring_only = match value {
                    "auto" => false,
                    "ring" => true,
                    _ => return Err(bad(key, "must be auto or ring")),
                }
            }
            "sqpoll" => {
                self.sqpoll = match value {
                    "off" => None,
                    cpu => match cpus(key, cpu, online_cpus)?.as_slice() {
                        &[cpu] => Some(cpu),
                        _ => return Err(bad(key, "off or one CPU")),
                    },
                }
            }
            "fixed-buffers" => self.fixed_buffers = on_off(key, value)?,
            "serial" => {
                if value.len() > 20 {
                    return Err(bad(key, "at most 20 bytes"));
                }
                self.serial = Some(value.to_string());
            }
            "socket-group" => self.socket_group = Some(socket_group(key, value)?),
            "socket-mode" => self.socket_mode = socket_mode(key, value)?,
            "socket-fd" => {
                let number = value.parse::<i32>();
                let name_ok = !value.is_empty()
                    && value.len() <= 255
                    && value.bytes().all(|b| b.is_ascii_graphic() && b != b':');
                if !matches!(number, Ok(3..)) && (number.is_ok() || !name_ok) {
                    return Err(bad(key, "a descriptor number from 3, or a socket name"));
                }
                self.socket_fd = Some(value.to_string());
            }
            _ => return set_limit(&mut self.limits, key, value),
        }
        Ok(true)
    }

    /// The socket and the storage, with the storage's own keys.
    fn take_given(&mut self, given: Given) -> Result<(), SpecError> {
        self.socket = given.socket.ok_or_else(|| bad("socket", "required"))?;
        self.storage = given
            .storage
            .ok_or_else(|| bad("path", "one of path=, null=, mem= or rbd= is required"))?;
        match &mut self.storage {
            Storage::Rbd(target) => {
                if let Some(conf) = given.ceph_conf {
                    target.conf = conf;
                }
                if let Some(user) = given.ceph_user {
                    target.user = user;
                }
                if let Some(secs) = given.ceph_timeout {
                    target.timeout = Duration::from_secs(secs);
                }
            }
            _ if given.ceph_conf.is_some() => return Err(bad("ceph-conf", "only with rbd=")),
            _ if given.ceph_user.is_some() => return Err(bad("ceph-user", "only with rbd=")),
            _ if given.ceph_timeout.is_some() => return Err(bad("ceph-timeout", "only with rbd=")),
            _ => {}
        }
        match (&mut self.storage, given.image) {
            (Storage::Memory { image: slot, .. }, image) => *slot = image,
            (_, Some(_)) => return Err(bad("image", "only with mem=")),
            (_, None) => {}
        }
        Ok(())
    }

    /// The keys that only some storages take.
    fn check_storage_keys(&self) -> Result<(), SpecError> {
        if self.cache > 0 && !matches!(self.storage, Storage::File(_) | Storage::Rbd(_)) {
            return Err(bad("cache", "only with path= or rbd="));
        }
        if self.cache > 0 && self.handover {
            // The disk that takes the image over may be another process's: what it writes
            // would never reach this cache, which would serve the old blocks again.
            return Err(bad(
                "cache",
                "not with handover=on: another process writing the image would leave it stale",
            ));
        }
        if self.cache_preload && self.cache == 0 {
            return Err(bad("cache-preload", "only with cache="));
        }
        if self.cache_preload && !matches!(self.storage, Storage::File(_)) {
            return Err(bad("cache-preload", "only with path="));
        }
        if self.sqpoll.is_some() && !matches!(self.storage, Storage::File(_)) {
            return Err(bad("sqpoll", "only with path="));
        }
        if self.fixed_buffers && !matches!(self.storage, Storage::File(_)) {
            return Err(bad("fixed-buffers", "only with path="));
        }
        Ok(())
    }

    /// `encrypt=`, `key-file=` and `encrypt-discard=` go together, on a `path=` disk.
    fn check_encrypt(&self, encrypt: bool) -> Result<(), SpecError> {
        match (encrypt, &self.key_file) {
            (true, None) => return Err(bad("encrypt", "needs key-file=")),
            (false, Some(_)) => return Err(bad("key-file", "only with encrypt=aes-xts")),
            (false, None) if self.encrypt_discard => {
                return Err(bad("encrypt-discard", "only with encrypt=aes-xts"));
            }
            (true, Some(_)) if !matches!(self.storage, Storage::File(_)) => {
                return Err(bad("encrypt", "only with path="));
            }
            (true, Some(_)) if self.cache_preload => {
                return Err(bad(
                    "encrypt",
                    "not with cache-preload=on: it would load ciphertext",
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// `base=` and its options: only on a writable `path=` disk, and not with what it cannot
    /// compose with yet.
    fn check_base(&self) -> Result<(), SpecError> {
        if self.format != ImageFormat::Auto && !matches!(self.storage, Storage::File(_)) {
            return Err(bad("format", "only with path="));
        }
        if self.format == ImageFormat::Qcow2 && self.base.is_some() {
            return Err(bad(
                "format",
                "a qcow2 image names its own backing file: no base=",
            ));
        }
        if self.base_nbd.is_none() && self.base_timeout.is_some() {
            return Err(bad(
                "base-timeout",
                "only with an NBD base (base=nbd+unix://...)",
            ));
        }
        if self.base.is_none() {
            for (given, key) in [
                (self.base_block.is_some(), "base-block"),
                (self.base_copy_on_read, "base-copy-on-read"),
                (self.base_fill, "base-fill"),
            ] {
                if given {
                    return Err(bad(key, "only with base="));
                }
            }
            return Ok(());
        }
        let refuse = |key: &str, why: &str| Err(bad("base", format!("not with {key}: {why}")));
        if !matches!(self.storage, Storage::File(_)) {
            return Err(bad(
                "base",
                "only with path= (the file that holds what is written)",
            ));
        }
        if self.readonly {
            return refuse("readonly=on", "serve the base itself read-only instead");
        }
        if self.handover {
            return refuse("handover=on", "not supported on thin disks yet");
        }
        if self.cache_preload {
            return refuse(
                "cache-preload=on",
                "it would load DISK's raw file, not the disk",
            );
        }
        Ok(())
    }

    /// `track-changes=on`: only on a writable `path=` disk this process alone writes.
    fn check_track_changes(&self) -> Result<(), SpecError> {
        if !self.track_changes {
            if self.track_block.is_some() {
                return Err(bad("track-block", "only with track-changes=on"));
            }
            return Ok(());
        }
        let refuse = |why: &str| Err(bad("track-changes", why));
        if !matches!(self.storage, Storage::File(_)) {
            return refuse(
                "only with path= (its map lives beside the image; rbd=, null= and mem= have none)",
            );
        }
        if self.readonly {
            return refuse("not with readonly=on: nothing can change");
        }
        if self.handover {
            return refuse("not with handover=on: another process's writes would not be recorded");
        }
        Ok(())
    }

    /// Splits `k=v,k=v` into pairs. A CPU list may itself hold commas (`cpus=2,4,6`): an item
    /// without `=` continues the value before it.
    pub(super) fn pairs(text: &str) -> Result<Vec<(&str, String)>, SpecError> {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for item in text.split(',').filter(|item| !item.is_empty()) {
            match (item.split_once('='), pairs.last_mut()) {
                (Some((key, value)), _) => pairs.push((key, value.to_string())),
                (None, Some(("cpus", value))) => {
                    value.push(',');
                    value.push_str(item);
                }
                (None, _) => return Err(bad(item, "expected key=value")),
            }
        }
        Ok(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUS: &[usize] = &[0, 1, 2, 3];

    fn key_of(text: &str) -> String {
        DiskSpec::parse(text, CPUS).unwrap_err().key
    }

    #[test]
    fn full_spec() {
        let spec = DiskSpec::parse(
            "socket=/run/a.sock,path=/x.raw,queues=2,queue-size=128,mode=poll,cpus=2-3,readonly=on,direct=off,serial=abc",
            CPUS,
        )
        .unwrap();
        assert_eq!(spec.storage, Storage::File("/x.raw".into()));
        assert_eq!((spec.queues, spec.queue_size), (2, 128));
        assert_eq!(spec.cpus, vec![2, 3]);
        assert!(spec.readonly && !spec.direct);
        let grouped = DiskSpec::parse("socket=/s,null=1G,socket-group=root", CPUS).unwrap();
        assert_eq!(grouped.socket_group, Some(0));
        let grouped = DiskSpec::parse("socket=/s,null=1G,socket-group=65534", CPUS).unwrap();
        assert_eq!(grouped.socket_group, Some(65534));
        let spec =
            DiskSpec::parse("socket=/s,null=8G,queues=3,cpus=3,1,2,mode=event", CPUS).unwrap();
        assert_eq!(
            (spec.cpus.clone(), spec.mode),
            (vec![3, 1, 2], WaitMode::Event)
        );
    }

    #[test]
    fn defaults() {
        let spec = DiskSpec::parse("socket=/s,null=8G", CPUS).unwrap();
        assert_eq!(spec.storage, Storage::Null(8 << 30));
        assert_eq!(
            (spec.queues, spec.queue_size, spec.mode),
            (1, 256, WaitMode::Adaptive)
        );
        assert_eq!(spec.poll_us, 50);
        assert!(spec.direct && spec.batch && !spec.readonly);
    }

    #[test]
    fn errors_name_the_key() {
        assert_eq!(key_of("path=/x"), "socket");
        assert_eq!(key_of("socket=/s"), "path");
        assert_eq!(key_of("socket=/s,null=abc"), "null");
        assert_eq!(key_of("socket=/s,null=1G,queues=0"), "queues");
        assert_eq!(key_of("socket=/s,null=1G,queues=65"), "queues");
        assert_eq!(key_of("socket=/s,null=1G,queue-size=100"), "queue-size");
        assert_eq!(key_of("socket=/s,null=1G,queue-size=2048"), "queue-size");
        assert_eq!(key_of("socket=/s,null=1G,mode=spin"), "mode");
        assert_eq!(key_of("socket=/s,null=1G,mode=poll"), "cpus");
        // Two polling queues on one CPU share its thread.
        assert!(DiskSpec::parse("socket=/s,null=1G,mode=poll,queues=2,cpus=1,1", CPUS).is_ok());
        assert_eq!(key_of("socket=/s,null=1G,queues=3,cpus=1-2"), "cpus");
        assert_eq!(key_of("socket=/s,null=1G,cpus=9"), "cpus");
        assert_eq!(key_of("socket=/s,null=1G,readonly=maybe"), "readonly");
        assert_eq!(
            key_of("socket=/s,null=1G,serial=123456789012345678901"),
            "serial"
        );
        assert_eq!(key_of("socket=/s,null=1G,colour=red"), "colour");
        assert_eq!(key_of("socket=/s,null=1G,io=fast"), "io");
        assert_eq!(key_of("socket=/s,path=/x,sqpoll=9"), "sqpoll");
        assert_eq!(key_of("socket=/s,path=/x,sqpoll=1-2"), "sqpoll");
        assert_eq!(key_of("socket=/s,null=1G,sqpoll=1"), "sqpoll");
        let spec = DiskSpec::parse("socket=/s,path=/x,io=ring,sqpoll=3", CPUS).unwrap();
        assert_eq!((spec.ring_only, spec.sqpoll), (true, Some(3)));
        assert_eq!(key_of("socket=/s,mem=1G,fixed-buffers=on"), "fixed-buffers");
        let spec = DiskSpec::parse("socket=/s,path=/x,fixed-buffers=on", CPUS).unwrap();
        assert!(spec.fixed_buffers);
        assert_eq!(
            key_of("socket=/s,null=1G,socket-group=no-such-group"),
            "socket-group"
        );
        assert_eq!(key_of("socket=/s,null=1G,path=/x"), "path");
        assert_eq!(key_of("socket=/s,mem=1000"), "mem");
        assert_eq!(key_of("socket=/s,null=1G,mem=1G"), "mem");
        assert_eq!(key_of("socket=/s,path=/x,image=/y"), "image");
        assert_eq!(key_of("socket=/s,mem=1G,cache=1G"), "cache");
        assert_eq!(key_of("socket=/s,path=/x,cache=lots"), "cache");
        assert_eq!(key_of("socket=/s,path=/x,cache=1G,handover=on"), "cache");
        assert_eq!(
            key_of("socket=/s,path=/x,cache-preload=on"),
            "cache-preload"
        );
    }

    #[test]
    fn every_listed_key_is_parsed_and_no_other() {
        for key in super::super::DISK_KEYS {
            let text = format!("socket=/s,null=1G,{}=?", key.name);
            if let Err(e) = DiskSpec::parse(&text, CPUS) {
                assert!(!e.reason.contains("defect"), "{}: {e}", key.name);
            }
        }
        assert!(key_of("socket=/s,null=1G,colour=red").contains("colour"));
    }

    #[test]
    fn track_changes_and_its_refusals() {
        let spec =
            DiskSpec::parse("socket=/s,path=/d,track-changes=on,track-block=1M", CPUS).unwrap();
        assert!(spec.track_changes);
        assert_eq!(spec.track_block, Some(1 << 20));
        let thin = DiskSpec::parse("socket=/s,path=/d,base=/b,track-changes=on", CPUS).unwrap();
        assert!(thin.track_changes && thin.track_block.is_none());
        for bad in [
            "null=1G,track-changes=on",
            "mem=1G,track-changes=on",
            "rbd=p/i,track-changes=on",
            "path=/d,readonly=on,track-changes=on",
            "path=/d,handover=on,track-changes=on",
        ] {
            assert_eq!(
                key_of(&format!("socket=/s,{bad}")),
                "track-changes",
                "{bad}"
            );
        }
        for bad in [
            "track-block=64K",
            "track-changes=on,track-block=3K",
            "track-changes=on,track-block=32M",
        ] {
            assert_eq!(
                key_of(&format!("socket=/s,path=/d,{bad}")),
                "track-block",
                "{bad}"
            );
        }
    }

    #[test]
    fn an_nbd_base_and_its_timeout() {
        let nbd = "base=nbd+unix:///golden?socket=/run/nbd.sock";
        let spec = DiskSpec::parse(&format!("socket=/s,path=/d,{nbd}"), CPUS).unwrap();
        assert_eq!(spec.base_nbd.map(|uri| uri.export), Some("golden".into()));
        for (bad, key) in [
            ("base=nbd://host/golden", "base"),
            ("base=nbd+unix:///golden", "base"),
            ("base=/golden.raw,base-timeout=5", "base-timeout"),
            (&format!("{nbd},base-timeout=0") as &str, "base-timeout"),
            (&format!("{nbd},readonly=on"), "base"),
        ] {
            assert_eq!(key_of(&format!("socket=/s,path=/d,{bad}")), key, "{bad}");
        }
    }

    #[test]
    fn base_and_its_options() {
        let spec = DiskSpec::parse(
            "socket=/s,path=/d.raw,base=/golden.raw,base-block=1M,base-fill=on",
            CPUS,
        )
        .unwrap();
        assert_eq!(spec.base, Some(PathBuf::from("/golden.raw")));
        assert_eq!((spec.base_block, spec.base_fill), (Some(1 << 20), true));
        assert!(!spec.base_copy_on_read);
        assert_eq!(key_of("socket=/s,path=/d,base-fill=on"), "base-fill");
        assert_eq!(
            key_of("socket=/s,path=/d,base=/b,base-block=3K"),
            "base-block"
        );
        assert_eq!(
            key_of("socket=/s,path=/d,base=/b,base-block=32M"),
            "base-block"
        );
        for bad in ["mem=1G", "null=1G"] {
            assert_eq!(key_of(&format!("socket=/s,{bad},base=/b")), "base");
        }
        for bad in ["readonly=on", "handover=on", "cache=1G,cache-preload=on"] {
            let err = DiskSpec::parse(&format!("socket=/s,path=/d,base=/b,{bad}"), CPUS);
            let err = err.unwrap_err();
            assert_eq!(err.key, "base", "{bad}");
            assert!(err.reason.starts_with("not with"), "{err}");
        }
    }

    #[test]
    fn encryption_and_its_key() {
        let spec = DiskSpec::parse(
            "socket=/s,path=/d,encrypt=aes-xts,key-file=/k,cache=1G",
            CPUS,
        )
        .unwrap();
        assert_eq!(spec.key_file, Some(PathBuf::from("/k")));
        assert!(!spec.encrypt_discard);
        let spec = "socket=/s,path=/d,encrypt=aes-xts,key-file=/k,encrypt-discard=on";
        assert!(DiskSpec::parse(spec, CPUS).unwrap().encrypt_discard);
        assert_eq!(
            key_of("socket=/s,path=/d,encrypt-discard=on"),
            "encrypt-discard"
        );
        assert_eq!(key_of("socket=/s,path=/d,encrypt=aes-xts"), "encrypt");
        assert_eq!(
            key_of("socket=/s,path=/d,encrypt=rot13,key-file=/k"),
            "encrypt"
        );
        assert_eq!(key_of("socket=/s,path=/d,key-file=/k"), "key-file");
        assert_eq!(
            key_of("socket=/s,mem=1G,encrypt=aes-xts,key-file=/k"),
            "encrypt"
        );
        // The base holds ciphertext under the same key.
        let thin = "socket=/s,path=/d,base=/b,encrypt=aes-xts,key-file=/k";
        assert!(DiskSpec::parse(thin, CPUS).is_ok());
    }

    #[test]
    fn memory_and_cache() {
        let spec = DiskSpec::parse("socket=/s,image=/i.raw,mem=4G", CPUS).unwrap();
        assert_eq!(
            spec.storage,
            Storage::Memory {
                size: 4 << 30,
                image: Some("/i.raw".into())
            }
        );
        let spec = DiskSpec::parse("socket=/s,path=/x.raw,cache=2G", CPUS).unwrap();
        assert_eq!(spec.cache, 2 << 30);
        assert!(!spec.cache_preload);
        let spec = DiskSpec::parse("socket=/s,path=/x,cache=1G,cache-preload=on", CPUS).unwrap();
        assert!(spec.cache_preload);
        assert_eq!(DiskSpec::parse("socket=/s,null=1G", CPUS).unwrap().cache, 0);
    }

    #[test]
    fn rbd_image_and_its_cluster() {
        let spec = DiskSpec::parse("socket=/s,rbd=volumes/vm1,queues=2", CPUS).unwrap();
        let Storage::Rbd(target) = &spec.storage else {
            panic!("not rbd: {:?}", spec.storage);
        };
        assert_eq!((&*target.pool, &*target.namespace), ("volumes", ""));
        assert_eq!(&*target.image, "vm1");
        assert_eq!(target.conf, PathBuf::from("/etc/ceph/ceph.conf"));
        assert_eq!(target.user, "admin");
        assert_eq!(target.timeout, Duration::from_secs(30));
        let spec = DiskSpec::parse(
            "socket=/s,rbd=p/ns/img,ceph-conf=/c.conf,ceph-user=cinder,ceph-timeout=5",
            CPUS,
        )
        .unwrap();
        let Storage::Rbd(target) = &spec.storage else {
            panic!("not rbd");
        };
        assert_eq!(
            (&*target.pool, &*target.namespace, &*target.image),
            ("p", "ns", "img")
        );
        assert_eq!(
            (&*target.user, target.timeout),
            ("cinder", Duration::from_secs(5))
        );
        assert_eq!(target.conf, PathBuf::from("/c.conf"));
        for bad in ["rbd=img", "rbd=/img", "rbd=p//img", "rbd=a/b/c/d", "rbd=p/"] {
            assert_eq!(key_of(&format!("socket=/s,{bad}")), "rbd", "{bad}");
        }
        assert_eq!(key_of("socket=/s,rbd=p/i,path=/x"), "path");
        assert_eq!(key_of("socket=/s,null=1G,ceph-user=x"), "ceph-user");
        assert_eq!(key_of("socket=/s,rbd=p/i,ceph-timeout=0"), "ceph-timeout");
        let cached = DiskSpec::parse("socket=/s,rbd=p/i,cache=1G", CPUS).unwrap();
        assert_eq!(cached.cache, 1 << 30);
        assert_eq!(
            key_of("socket=/s,rbd=p/i,cache=1G,cache-preload=on"),
            "cache-preload"
        );
    }
}
