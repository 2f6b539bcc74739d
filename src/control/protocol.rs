//! The control protocol's messages, typed once for both ends: `vbmq ctl` serializes a
//! [`Request`] and reads a [`Reply`]; the daemon reads the request and writes the reply
//! (docs/control.md gives the wire format).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The protocol version every reply carries; a request naming another is refused.
pub const VERSION: u64 = 1;

/// One request: the object's `"command"` names the variant, its other keys the arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    /// Serve one more disk.
    AddDisk {
        /// Exactly a `--disk` value.
        spec: String,
        /// The descriptors passed with the request (`SCM_RIGHTS`), in order: what `vbmq ctl`
        /// opened and bound for the disk.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fds: Vec<Passed>,
    },
    /// Stop the disk on this socket.
    RemoveDisk {
        /// The disk's socket path.
        socket: String,
    },
    /// Serve one more share, from the descriptors sent with the request (docs/control.md).
    AddFs {
        /// Exactly an `--fs` value.
        spec: String,
        /// The descriptor after the directory is a detached mount of it, which the share is
        /// served from (`vbmq ctl add-fs` makes one where it may).
        #[serde(
            default,
            deserialize_with = "loose",
            skip_serializing_if = "std::ops::Not::not"
        )]
        mount: bool,
    },
    /// Stop the share on this socket.
    RemoveFs {
        /// The share's socket path.
        socket: String,
    },
    /// Change a disk's capacity.
    Resize {
        /// The disk's socket path.
        socket: String,
        /// The new capacity; `None` when absent or neither bytes nor text (refused).
        #[serde(default, deserialize_with = "loose")]
        size: Option<Size>,
        /// Whether it may shrink (anything but `true` is no).
        #[serde(default, deserialize_with = "loose")]
        force: bool,
    },
    /// Set a disk's I/O limits.
    SetLimits {
        /// The disk's socket path.
        socket: String,
        /// `iops=N,bps=SIZE,...` or `none`.
        limits: String,
    },
    /// Read the configuration file again and apply what changed.
    Reload {
        /// A line that cannot change in place is removed and added (anything but `true`: no).
        #[serde(
            default,
            deserialize_with = "loose",
            skip_serializing_if = "std::ops::Not::not"
        )]
        replace: bool,
    },
    /// Write the disk's contents at one instant into the file passed with the request (one
    /// descriptor, open for writing); answered once the file is complete and synced.
    Snapshot {
        /// The disk's socket path.
        socket: String,
        /// A name to track changed blocks from (refused until changed-block tracking exists).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// Start a named changed-block map on a `track-changes=on` disk, at this instant.
    Checkpoint {
        /// The disk's socket path.
        socket: String,
        /// The map's name.
        name: String,
    },
    /// The extents written since a named map began.
    ChangedBlocks {
        /// The disk's socket path.
        socket: String,
        /// The map's name.
        since: String,
    },
    /// Drop a named changed-block map.
    ForgetCheckpoint {
        /// The disk's socket path.
        socket: String,
        /// The map's name.
        name: String,
    },
    /// Serve the disk as it is at this instant, read-only, to NBD clients of the listening
    /// socket passed with the request, saving what the guest overwrites into the scratch file
    /// passed after it (two descriptors: the socket, the scratch open for reading and writing).
    ExportBegin {
        /// The disk's socket path.
        socket: String,
        /// Where the export is served, as the operator named it (`unix:PATH`, or
        /// `tcp:HOST:PORT`: then TLS only, its `ca-cert.pem`, `server-cert.pem` and
        /// `server-key.pem` passed after the other descriptors).
        address: String,
        /// TCP: clients must present a certificate the CA signed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tls_verify_peer: bool,
        /// Checkpoints served as `qemu:dirty-bitmap:NAME` contexts (`track-changes=on`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        bitmaps: Vec<String>,
        /// A checkpoint begun at the export's instant.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        checkpoint: Option<String>,
    },
    /// Serve the disk, which no guest has started on, for reading and writing to NBD clients
    /// of the listening socket passed with the request (one descriptor), through the disk's
    /// stack: a mirror's destination. A guest's first ring ends it.
    ExportBeginWritable {
        /// The disk's socket path.
        socket: String,
        /// Where the export is served, as the operator named it (`unix:PATH`, or
        /// `tcp:HOST:PORT` with its credentials, as for `ExportBegin`).
        address: String,
        /// TCP: clients must present a certificate the CA signed.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        tls_verify_peer: bool,
    },
    /// Mirror the disk to the NBD export `destination` (`nbd+unix:///NAME?socket=PATH`, or
    /// `nbds://HOST:PORT/NAME`: then its `ca-cert.pem`, and `client-cert.pem` and
    /// `client-key.pem` if the client has them, are passed after the socket),
    /// whose socket is connected by the sender and passed with the request (one descriptor):
    /// a background copy, and every guest write to both sides from now on.
    MirrorBegin {
        /// The disk's socket path.
        socket: String,
        /// The destination's NBD URI.
        destination: String,
        /// Answer once the destination holds everything (or the mirror failed).
        #[serde(default)]
        wait_ready: bool,
        /// Copy only what the destination of the disk's failed mirror may miss.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        resume: bool,
        /// Seconds the destination may leave every request unanswered (default 30).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
    /// Stop mirroring the disk: its destination is flushed and disconnected.
    MirrorEnd {
        /// The disk's socket path.
        socket: String,
    },
    /// End the export of the disk on `address`: its clients are disconnected, its scratch
    /// discarded.
    ExportEnd {
        /// The disk's socket path.
        socket: String,
        /// As given to `export-begin`.
        address: String,
    },
    /// Every disk and share.
    List,
    /// Counters of every disk and share, or of the one on `socket` (a non-string `socket` is
    /// no socket).
    Stats {
        /// The device's socket path.
        #[serde(
            default,
            deserialize_with = "loose",
            skip_serializing_if = "Option::is_none"
        )]
        socket: Option<String>,
    },
}

/// What a descriptor passed with a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Passed {
    /// The disk's vhost-user socket, bound and listening.
    Socket,
    /// The image, opened without `O_DIRECT`.
    Image,
    /// The image, opened with `O_DIRECT`.
    ImageDirect,
    /// `base=`: the base image, read-only, without `O_DIRECT`.
    Base,
    /// `base=`: the base image, read-only, with `O_DIRECT`.
    BaseDirect,
    /// `base=`: the image's map (`DISK.map`), read-write.
    Map,
    /// `key-file=`: the key file or pipe, opened to read.
    Key,
    /// `track-changes=on`: the image's changed-block maps (`DISK.changes`), read-write.
    Changes,
    /// A file of a qcow2 image's (or qcow2 base's) backing chain, read-only; one per level,
    /// top's backing file first.
    Backing,
}

/// A capacity as sent: a number of bytes or a size text such as `40G`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// Bytes.
    Bytes(u64),
    /// A size text (`40G`), parsed by the daemon.
    Text(String),
}

/// A request with the protocol version, as `vbmq ctl` sends it.
#[derive(Serialize)]
pub struct Versioned<'a> {
    /// [`VERSION`].
    pub version: u64,
    /// The request.
    #[serde(flatten)]
    pub request: &'a Request,
}

impl Request {
    /// Reads a request line: the errors are the lines a refused request is answered with.
    pub fn parse(line: &[u8]) -> Result<Request, String> {
        let value =
            serde_json::from_slice::<Value>(line).map_err(|e| format!("malformed request: {e}"))?;
        let object = value.as_object().ok_or("a request is a JSON object")?;
        match object.get("version") {
            None => {}
            Some(v) if v.as_u64() == Some(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "unsupported version {v}: this vbmq speaks {VERSION}"
                ));
            }
        }
        let command = object
            .get("command")
            .and_then(Value::as_str)
            .ok_or("missing \"command\"")?
            .to_owned();
        serde_json::from_value(value).map_err(|e| refusal(&command, &e))
    }
}

/// Serde's complaint about a named command, in the words the daemon has always used.
fn refusal(command: &str, error: &serde_json::Error) -> String {
    let text = error.to_string();
    if text.starts_with("unknown variant") {
        return format!("unknown command {command:?}");
    }
    match text
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        Some(key) => format!("{command}: missing string \"{key}\""),
        None => format!("{command}: {text}"),
    }
}

/// An optional argument of the wrong type reads as its default, as it always has.
fn loose<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

/// A key that is there is `Some`, even when `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Answer>, D::Error> {
    Answer::deserialize(deserializer).map(Some)
}

/// One reply line: `{"version", "ok", "result"}` or `{"version", "ok": false, "error"}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// [`VERSION`].
    pub version: u64,
    /// Whether the request was done.
    pub ok: bool,
    /// What a done request returns (`null` for `remove-disk`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Answer>,
    /// Why a request was refused, one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Reply {
    /// A done request's reply.
    pub fn done(answer: Answer) -> Reply {
        Reply {
            version: VERSION,
            ok: true,
            result: Some(answer),
            error: None,
        }
    }

    /// A refused request's reply.
    pub fn refused(error: impl Into<String>) -> Reply {
        Reply {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(error.into()),
        }
    }
}

/// A done request's `result`, by the command's kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    /// `remove-disk`, `remove-fs`: `null`.
    Nothing,
    /// `add-disk`, `resize`, `set-limits`: the disk.
    Disk(DiskEntry),
    /// `add-fs`: the share.
    Share(ShareEntry),
    /// `list`.
    Devices(Vec<DeviceEntry>),
    /// `stats`.
    Stats(Vec<DiskStats>),
    /// `reload`: what it did, a line each.
    Notes(Vec<String>),
    /// `snapshot`: how it was taken.
    Snapshot(SnapshotEntry),
    /// `changed-blocks`.
    Changes(ChangedBlocks),
    /// `export-begin`.
    Export(ExportEntry),
    /// `mirror-begin`, `mirror-end`.
    Mirror(MirrorEntry),
}

/// A mirror's state, as `mirror-begin`, `mirror-end` and `list` give it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MirrorEntry {
    /// `"copying"`, `"ready"` (the destination holds everything) or `"failed"`.
    pub state: String,
    /// Bytes the background copy has on the destination.
    pub copied: u64,
    /// Bytes of the disk.
    pub total: u64,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An export begun, as `export-begin` gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportEntry {
    /// Where it is served.
    pub address: String,
    /// Bytes of the export: the disk's capacity at its instant.
    pub bytes: u64,
    /// The unit in which the guest's writes save old contents, and `NBD_CMD_TRIM` releases.
    pub block_size: u32,
}

/// A finished snapshot, as `snapshot` gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    /// `"reflink"` (the image cloned) or `"copy"` (copy-before-write).
    pub method: String,
    /// Bytes of the snapshot: the disk's capacity at its instant.
    pub bytes: u64,
    /// From the request to the file synced, milliseconds.
    pub duration_ms: u64,
    /// Blocks a guest write had to copy before it went on (copy only).
    pub copied_before_write: u64,
}

/// The blocks written since a named map began, as `changed-blocks` gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChangedBlocks {
    /// The map's name.
    pub name: String,
    /// Bytes per tracked block.
    pub block_size: u64,
    /// The disk's capacity in bytes.
    pub capacity: u64,
    /// The changed ranges, sorted, adjacent blocks merged.
    pub extents: Vec<Extent>,
}

/// A changed range of a disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent {
    /// Byte offset.
    pub offset: u64,
    /// Bytes.
    pub length: u64,
}

/// A named changed-block map of a disk, as `list` gives it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointEntry {
    /// Its name.
    pub name: String,
    /// Whether its extents can be trusted.
    pub valid: bool,
    /// Why not, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One disk, as `list` gives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskEntry {
    /// The vhost-user socket.
    pub socket: String,
    /// The `--disk` text it was given.
    pub spec: String,
    /// Capacity in bytes.
    pub size: u64,
    /// Number of virtqueues.
    pub queues: usize,
    /// Whether a frontend is attached.
    pub connected: bool,
    /// The limits set, by their `--disk` key (none: empty).
    pub limits: BTreeMap<String, u64>,
    /// Its changed-block maps (`track-changes=on`; none: absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checkpoints: Vec<CheckpointEntry>,
    /// Its mirror (`mirror-begin`; none: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<MirrorEntry>,
}

/// What a device is: `"disk"` or `"fs"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A virtio-blk disk.
    #[default]
    Disk,
    /// A virtio-fs share.
    Fs,
}

/// One device as `list` gives it: its `"kind"` and its fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DeviceEntry {
    /// A disk.
    Disk(DiskEntry),
    /// A share.
    Fs(ShareEntry),
}

/// One share, as `list` and `add-fs` give it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShareEntry {
    /// The vhost-user socket.
    pub socket: String,
    /// The `--fs` text it was given.
    pub spec: String,
    /// The tag the guest mounts.
    pub tag: String,
    /// The shared directory, as the spec names it.
    pub dir: String,
    /// Request queues (the high-priority queue comes on top).
    pub queues: usize,
    /// Whether every change is refused.
    pub readonly: bool,
    /// Whether a frontend is attached.
    pub connected: bool,
}

/// One device's counters, as `stats` gives them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskStats {
    /// The vhost-user socket.
    pub socket: String,
    /// A disk or a share.
    #[serde(default)]
    pub kind: Kind,
    /// Each queue's counters.
    pub queues: Vec<QueueStats>,
    /// The storage engine's own counters.
    pub engine: BTreeMap<String, u64>,
}

/// One queue's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// The queue's index.
    pub queue: usize,
    /// Requests completed.
    pub requests: u64,
    /// Requests completed with an error status.
    pub errors: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Requests by kind: read, write, flush, other.
    pub ops: BTreeMap<String, u64>,
    /// Requests in flight.
    pub in_flight: u64,
    /// Passes over the ring.
    pub passes: u64,
    /// Passes that found work.
    pub busy_passes: u64,
    /// Requests answered `VIRTIO_BLK_S_UNSUPP`.
    pub unsupported: u64,
    /// Time the serving thread slept, milliseconds.
    pub sleep_ms: u64,
    /// Latency percentiles, each the upper bound of its power-of-two bucket.
    pub latency_us: Latency,
}

/// Latency percentiles in microseconds (`null`: no request completed).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: Option<u64>,
    /// 90th percentile.
    pub p90: Option<u64>,
    /// 99th percentile.
    pub p99: Option<u64>,
    /// 99.9th percentile.
    pub p999: Option<u64>,
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
