//! Every `--disk` key, with its value, default and meaning: the one list the parser accepts and
//! the help prints.

/// One `--disk` key.
#[derive(Clone, Copy, Debug)]
pub struct DiskKey {
    /// The key, e.g. `queues`.
    pub name: &'static str,
    /// The form of its value, e.g. `N`.
    pub value: &'static str,
    /// What applies when it is not given.
    pub default: Option<&'static str>,
    /// One line on what it does.
    pub about: &'static str,
}

const fn key(
    name: &'static str,
    value: &'static str,
    default: Option<&'static str>,
    about: &'static str,
) -> DiskKey {
    DiskKey {
        name,
        value,
        default,
        about,
    }
}

/// The keys `DiskSpec::parse` accepts; any other is refused.
pub const DISK_KEYS: &[DiskKey] = &[
    key("socket", "PATH", None, "the vhost-user socket (required)"),
    key("path", "FILE", None, "a raw image file or a block device"),
    key(
        "null",
        "SIZE",
        None,
        "instead of path: a null device (reads zeros, drops writes)",
    ),
    key(
        "mem",
        "SIZE",
        None,
        "instead of path: a volatile disk in host memory",
    ),
    key(
        "rbd",
        "POOL/[NS/]IMAGE",
        None,
        "instead of path: a Ceph RBD image, through librbd",
    ),
    key(
        "ceph-conf",
        "FILE",
        Some("/etc/ceph/ceph.conf"),
        "with rbd: the Ceph configuration (monitors, keyring)",
    ),
    key(
        "ceph-user",
        "NAME",
        Some("admin"),
        "with rbd: the Ceph user, without client.",
    ),
    key(
        "ceph-timeout",
        "SECONDS",
        Some("30"),
        "with rbd: an operation the cluster leaves unanswered fails",
    ),
    key(
        "image",
        "FILE",
        None,
        "with mem: a raw image loaded at start",
    ),
    key(
        "format",
        "auto|raw|qcow2",
        Some("auto"),
        "with path=: the image's format; auto serves an image that starts with the qcow2 magic \
         as qcow2 (its backing chain too)",
    ),
    key(
        "base",
        "FILE",
        None,
        "with path=: a read-only base image (file or block device), or an NBD export \
         (nbd+unix:///NAME?socket=PATH), that DISK is a thin copy of; its map is DISK.map \
         (docs/operate.md)",
    ),
    key(
        "base-timeout",
        "SECS",
        Some("30"),
        "with an NBD base: how long a read of an unfetched block waits for a lost connection \
         to come back before it fails (1..=3600)",
    ),
    key(
        "base-block",
        "SIZE",
        Some("64K, or the map's"),
        "with base: bytes copied from the base on a block's first write, a power of two 4K..16M",
    ),
    key(
        "base-copy-on-read",
        "on|off",
        Some("off"),
        "with base: blocks read from the base are copied into DISK",
    ),
    key(
        "base-fill",
        "on|off",
        Some("off"),
        "with base: copy every block into DISK in the background, so the base can be retired",
    ),
    key(
        "track-changes",
        "on|off",
        Some("off"),
        "with path=: record which blocks change since named checkpoints (vbmq ctl checkpoint, \
         changed-blocks), in DISK.changes beside the image; the disk then keeps its size",
    ),
    key(
        "track-block",
        "SIZE",
        Some("64K, or the map file's"),
        "with track-changes: bytes per tracked block, a power of two 4K..16M",
    ),
    key(
        "encrypt",
        "aes-xts",
        Some("off"),
        "with path=: the image holds AES-256-XTS ciphertext only (per-sector tweak); needs key-file; with base=, the base holds ciphertext under the same key",
    ),
    key(
        "key-file",
        "FILE",
        None,
        "with encrypt: the 64-byte key, read once at start (may be a pipe)",
    ),
    key(
        "encrypt-discard",
        "on|off",
        Some("off"),
        "with encrypt: pass discards to the image (it then shows which ranges are unused); off: a discarded range keeps its old ciphertext",
    ),
    key(
        "cache",
        "SIZE",
        Some("none"),
        "with path= or rbd=, not with handover=on: a DRAM read cache shared by the disks on that image",
    ),
    key(
        "cache-preload",
        "on|off",
        Some("off"),
        "fill the cache from the file at start",
    ),
    key(
        "queues",
        "N",
        Some("1"),
        "virtqueues, 1..=64; the VM's num-queues must match",
    ),
    key(
        "queue-size",
        "N",
        Some("256"),
        "largest virtqueue size, a power of two <= 1024",
    ),
    key(
        "mode",
        "event|poll|adaptive",
        Some("adaptive"),
        "how the I/O threads wait",
    ),
    key(
        "poll-us",
        "N",
        Some("50"),
        "adaptive: microseconds of polling after the last request",
    ),
    key(
        "cpus",
        "LIST",
        Some("not pinned"),
        "CPUs of the I/O threads (2-5, 2,4); required for poll",
    ),
    key(
        "readonly",
        "on|off",
        Some("off"),
        "offer VIRTIO_BLK_F_RO and refuse every write",
    ),
    key(
        "direct",
        "on|off",
        Some("on"),
        "O_DIRECT; off uses the host page cache",
    ),
    key(
        "lock",
        "on|off",
        Some("on"),
        "lock the image against other processes (shared if read-only, exclusive if writable)",
    ),
    key(
        "handover",
        "on|off",
        Some("off"),
        "lock the image only while writing, so that another handover=on disk (of this process or another) can take over: live migration",
    ),
    key(
        "iops",
        "N",
        Some("0"),
        "at most N requests a second (0: no limit)",
    ),
    key("read-iops", "N", Some("0"), "at most N reads a second"),
    key(
        "write-iops",
        "N",
        Some("0"),
        "at most N writes a second (flush, discard too)",
    ),
    key(
        "bps",
        "SIZE",
        Some("0"),
        "at most SIZE bytes a second, e.g. 200M",
    ),
    key(
        "read-bps",
        "SIZE",
        Some("0"),
        "at most SIZE bytes read a second",
    ),
    key(
        "write-bps",
        "SIZE",
        Some("0"),
        "at most SIZE bytes written a second",
    ),
    key(
        "iops-burst",
        "N",
        Some("a tenth of a second's worth"),
        "requests taken at once after a quiet spell",
    ),
    key(
        "bps-burst",
        "SIZE",
        Some("a tenth of a second's worth"),
        "bytes taken at once after a quiet spell",
    ),
    key(
        "inflight",
        "on|off",
        Some("on"),
        "keep requests in flight in memory the frontend holds, so a restarted vbmq submits them again",
    ),
    key(
        "delay-us",
        "N",
        Some("0"),
        "fault injection for tests: hold chosen requests' completions N microseconds",
    ),
    key(
        "discard",
        "on|off",
        Some("on"),
        "off: offer the guest neither discard nor write-zeroes, so no request punches a hole in the image (a preallocated image stays allocated)",
    ),
    key(
        "delay-every",
        "N",
        Some("16"),
        "with delay-us: hold every Nth request of each queue (out-of-order completions)",
    ),
    key(
        "serial",
        "STR",
        Some("the file name"),
        "the GET_ID serial, at most 20 bytes",
    ),
    key(
        "batch",
        "on|off",
        Some("on"),
        "off: one system call per request (benchmark ablation)",
    ),
    key(
        "io",
        "auto|ring",
        Some("auto"),
        "ring: every read and write through io_uring, even on tmpfs",
    ),
    key(
        "sqpoll",
        "off|CPU",
        Some("off"),
        "io_uring submissions taken by a kernel thread spinning on CPU: no system call to \
         submit (fast block devices; with io=ring on files)",
    ),
    key(
        "fixed-buffers",
        "on|off",
        Some("off"),
        "register the guest's memory with each queue's io_uring: no page pinning per O_DIRECT \
         request (block devices; pins the guest's RAM once per queue)",
    ),
    key(
        "socket-mode",
        "OCTAL",
        Some("0600"),
        "permission bits of the socket",
    ),
    key(
        "socket-group",
        "NAME|GID",
        Some("the process's"),
        "group owning the socket",
    ),
    key(
        "socket-fd",
        "N|NAME",
        None,
        "serve this inherited listening socket instead of binding socket= (a descriptor \
         number, or a FileDescriptorName= of systemd socket activation); at start only",
    ),
];

/// Looks a key up.
pub fn disk_key(name: &str) -> Option<&'static DiskKey> {
    DISK_KEYS.iter().find(|key| key.name == name)
}

/// The keys as a help section, one per line.
pub fn disk_keys_help() -> String {
    let width = DISK_KEYS
        .iter()
        .map(|k| k.name.len() + k.value.len() + 1)
        .max()
        .unwrap_or(0);
    let mut text = String::from("--disk keys (KEY=VALUE, separated by commas):\n");
    for k in DISK_KEYS {
        let form = format!("{}={}", k.name, k.value);
        let default = k
            .default
            .map(|d| format!(" [default: {d}]"))
            .unwrap_or_default();
        text.push_str(&format!("  {form:<width$}  {}{default}\n", k.about));
    }
    text
}
