//! Where a mirror writes: an NBD export (another vbmq's `export-begin --writable`), reached
//! through the NBD client. Requests are pipelined, and sent in batches; each one's outcome
//! comes back through its [`Done`], on the client's thread.

/// A request's outcome: `Err` says why it failed.
pub type Done = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Requests sent together, each with what to do with its outcome.
pub type Batch<'a> = Vec<(Remote<'a>, Done)>;

/// One request to the destination.
#[derive(Clone, Copy, Debug)]
pub enum Remote<'a> {
    /// Write `data` at `offset`.
    Write {
        /// Where.
        offset: u64,
        /// What.
        data: &'a [u8],
    },
    /// Zero `len` bytes at `offset` (the destination may deallocate them).
    Zeroes {
        /// Where.
        offset: u64,
        /// How many bytes.
        len: u32,
    },
    /// Make every write acknowledged so far durable.
    Flush,
}

/// A mirror's destination.
pub trait Destination: Send + Sync {
    /// Its size in bytes.
    fn size(&self) -> u64;
    /// Whether it refuses writes.
    fn read_only(&self) -> bool;
    /// Sends `requests` together (one system call where it can: a queue's guest writes of one
    /// pass); each `Done` runs once with its request's outcome (at once if it cannot be sent).
    /// The destination may run them in any order.
    fn submit_all(&self, requests: Batch<'_>);
    /// Ends the connection: every request in flight fails.
    fn abort(&self);
}

impl Destination for crate::nbd::client::Client {
    fn size(&self) -> u64 {
        self.info().size
    }

    fn read_only(&self) -> bool {
        self.info().read_only()
    }

    fn submit_all(&self, requests: Batch<'_>) {
        use crate::nbd::client::{Command, Completion};
        let commands = requests.into_iter().map(|(request, done)| {
            let command = match request {
                Remote::Write { offset, data } => Command::Write {
                    offset,
                    data,
                    fua: false,
                },
                Remote::Zeroes { offset, len } => Command::WriteZeroes {
                    offset,
                    len,
                    may_trim: true,
                },
                Remote::Flush => Command::Flush,
            };
            let done: Completion =
                Box::new(move |result| done(result.map(drop).map_err(|e| e.to_string())));
            (command, done)
        });
        crate::nbd::client::Client::submit_all(self, commands);
    }

    fn abort(&self) {
        crate::nbd::client::Client::abort(self);
    }
}
