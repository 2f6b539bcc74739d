//! What a case must get, in the terms of docs/hostile-guest.md ("What each bad input gets").

use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};

pub const OK: u8 = VIRTIO_BLK_S_OK as u8;
pub const IOERR: u8 = VIRTIO_BLK_S_IOERR as u8;
pub const UNSUPP: u8 = VIRTIO_BLK_S_UNSUPP as u8;

/// How the disk file may change.
#[derive(Clone, Debug, PartialEq)]
pub enum FileChange {
    None,
    /// These bytes at this offset (a successful write).
    Write {
        offset: u64,
        data: Vec<u8>,
    },
    /// Zeros (write-zeroes).
    Zero {
        offset: u64,
        len: u64,
    },
    /// Anything inside (discard leaves unspecified contents).
    Undefined {
        offset: u64,
        len: u64,
    },
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// One completion; this status byte at `status`.
    Status { status_at: u64, status: u8 },
    /// One completion; `OK` with the effect below, or `IOERR` and no effect. For layouts the spec
    /// allows but vbmq may refuse (split headers, descriptors that straddle regions).
    OkOrIoerr { status_at: u64 },
    /// A chain too broken to hold a status byte: one completion with used length 0, or an error
    /// status at the guest's status byte; never success.
    Broken { status_at: Option<u64> },
    /// The head cannot be returned (index >= queue size): no completion, the queue goes on.
    NoCompletion,
    /// A ring the device must stop trusting (avail index jumps): vbmq stops the queue and
    /// closes the connection, so that the frontend notices and resets the device; the next
    /// frontend must get a working queue.
    ConnectionEnds,
    /// The same head twice while in flight: at most two completions, each OK if it has a status.
    Reused { status_at: u64 },
}

#[derive(Clone, Debug)]
pub struct Expect {
    pub outcome: Outcome,
    /// Effect on the disk when the status is OK.
    pub change: FileChange,
    /// On OK: these guest ranges must hold the disk bytes at `offset` (a read).
    pub read: Option<(Vec<(u64, u32)>, u64)>,
}

impl Expect {
    pub fn status(status_at: u64, status: u8) -> Self {
        Expect {
            outcome: Outcome::Status { status_at, status },
            change: FileChange::None,
            read: None,
        }
    }
    pub fn ioerr(status_at: u64) -> Self {
        Self::status(status_at, IOERR)
    }
    pub fn unsupp(status_at: u64) -> Self {
        Self::status(status_at, UNSUPP)
    }
    pub fn ok(status_at: u64) -> Self {
        Self::status(status_at, OK)
    }
    pub fn ok_or_ioerr(status_at: u64) -> Self {
        Expect {
            outcome: Outcome::OkOrIoerr { status_at },
            change: FileChange::None,
            read: None,
        }
    }
    pub fn broken(status_at: Option<u64>) -> Self {
        Expect {
            outcome: Outcome::Broken { status_at },
            change: FileChange::None,
            read: None,
        }
    }
    pub fn no_completion() -> Self {
        Expect {
            outcome: Outcome::NoCompletion,
            change: FileChange::None,
            read: None,
        }
    }
    pub fn connection_ends() -> Self {
        Expect {
            outcome: Outcome::ConnectionEnds,
            change: FileChange::None,
            read: None,
        }
    }
    pub fn with_change(mut self, change: FileChange) -> Self {
        self.change = change;
        self
    }
    pub fn with_read(mut self, iov: Vec<(u64, u32)>, offset: u64) -> Self {
        self.read = Some((iov, offset));
        self
    }
}
