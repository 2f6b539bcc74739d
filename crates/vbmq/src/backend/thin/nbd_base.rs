//! `base=nbd+unix:///NAME?socket=PATH`: a thin disk's base read from an NBD export.
//!
//! One fetcher thread per disk owns the connection's life: it sends every read to the
//! pipelined client ([`Client::submit`]) and is the only thread that reconnects, so the queue
//! threads never block on the network and no two threads race to replace the connection.
//! A read the lost connection failed waits in the fetcher for a new one until its deadline
//! (the disk's `base-timeout=`), then fails with `EIO`; a reply always carries exactly the
//! bytes asked for (the client checks it), so a read never completes with wrong data.

use std::collections::VecDeque;
use std::io;
use std::sync::Mutex;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::nbd::client::{Client, ClientError, Command};
use crate::nbd::uri::NbdUri;

/// Called once with a read's bytes, or `-errno`; on the client's reply thread or the fetcher's.
pub type FetchDone = Box<dyn FnOnce(Result<Vec<u8>, i32>) + Send>;

/// A read of the export.
struct Fetch {
    offset: u64,
    len: u32,
    deadline: Instant,
    done: FetchDone,
}

enum Message {
    Fetch(Fetch),
    Stop,
}

/// The first and the longest pause between two reconnection attempts.
const RETRY_MIN: Duration = Duration::from_millis(10);
const RETRY_MAX: Duration = Duration::from_millis(500);

/// The export a thin disk's unwritten blocks come from.
pub struct NbdBase {
    size: u64,
    min_block: u32,
    max_request: u32,
    timeout: Duration,
    fetches: mpsc::Sender<Message>,
    fetcher: Mutex<Option<JoinHandle<()>>>,
}

impl NbdBase {
    /// Connects to the export `uri` names; reads wait up to `timeout` for a lost connection.
    pub fn connect(uri: &NbdUri, timeout: Duration) -> io::Result<Self> {
        let client = Client::connect_uri(uri).map_err(|e| io::Error::other(e.to_string()))?;
        let info = *client.info();
        if !info.size.is_multiple_of(512) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the export's size ({}) is not a multiple of 512", info.size),
            ));
        }
        let (fetches, inbox) = mpsc::channel();
        let retries = fetches.clone();
        let fetcher = std::thread::Builder::new()
            .name("vbmq-nbd-fetch".into())
            .spawn(move || Fetcher::new(client, retries).run(&inbox))?;
        // A read is widened to the export's minimum block (at most 64 KiB), then cut back: a
        // piece of a queue's read leaves room for that within the export's longest request.
        let min_block = info.min_block.clamp(1, 64 << 10);
        let max_request = (info.max_request.min(4 << 20).saturating_sub(2 * min_block)) / 512 * 512;
        if max_request == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the export's longest request is shorter than two of its blocks",
            ));
        }
        Ok(NbdBase {
            size: info.size,
            min_block,
            max_request,
            timeout,
            fetches,
            fetcher: Mutex::new(Some(fetcher)),
        })
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The longest read sent at once: longer ones are split by the caller.
    pub fn max_request(&self) -> u32 {
        self.max_request
    }

    /// Reads `len` bytes at `offset`; `done` runs once, with exactly `len` bytes or `-errno`.
    pub fn fetch(&self, offset: u64, len: u32, done: FetchDone) {
        let min = u64::from(self.min_block);
        let start = offset - offset % min;
        let end = offset
            .saturating_add(u64::from(len))
            .next_multiple_of(min)
            .min(self.size);
        let (head, wide) = (offset - start, end.saturating_sub(start));
        let done: FetchDone = match u32::try_from(wide) {
            Ok(wide) if head == 0 && wide == len => done,
            // `head + len <= wide`: the reply has exactly `wide` bytes (checked by the client).
            Ok(_) => Box::new(move |result| {
                done(result.and_then(|data| {
                    let from = crate::host_size(head);
                    let to = from + len as usize;
                    data.get(from..to).map(<[u8]>::to_vec).ok_or(-libc::EIO)
                }))
            }),
            Err(_) => return done(Err(-libc::EIO)),
        };
        let fetch = Fetch {
            offset: start,
            len: u32::try_from(wide).unwrap_or(u32::MAX),
            deadline: Instant::now() + self.timeout,
            done,
        };
        if let Err(mpsc::SendError(Message::Fetch(fetch))) =
            self.fetches.send(Message::Fetch(fetch))
        {
            (fetch.done)(Err(-libc::EIO));
        }
    }

    /// Fills `buf` from `offset`, on the caller's thread (the fill, a snapshot's copy).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = (buf.len() - done).min(self.max_request as usize);
            let (tx, rx) = mpsc::sync_channel(1);
            // `n <= max_request`, a u32.
            let len = u32::try_from(n).unwrap_or(u32::MAX);
            self.fetch(
                offset + done as u64,
                len,
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            );
            match rx.recv() {
                Ok(Ok(data)) if data.len() == n => buf[done..done + n].copy_from_slice(&data),
                Ok(Ok(_)) => return Err(io::Error::other("an NBD read of the wrong length")),
                Ok(Err(errno)) => return Err(io::Error::from_raw_os_error(-errno)),
                Err(_) => return Err(io::Error::other("the NBD fetcher stopped")),
            }
            done += n;
        }
        Ok(())
    }
}

impl Drop for NbdBase {
    fn drop(&mut self) {
        let _ = self.fetches.send(Message::Stop);
        let fetcher = self
            .fetcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(fetcher) = fetcher
            && fetcher.join().is_err()
        {
            tracing::error!("NBD base: the fetcher panicked");
        }
    }
}

/// The fetcher thread's state: the client, and the reads waiting for a connection.
struct Fetcher {
    client: Client,
    /// Where a read the lost connection failed comes back to.
    retries: mpsc::Sender<Message>,
    waiting: VecDeque<Fetch>,
    pause: Duration,
}

impl Fetcher {
    fn new(client: Client, retries: mpsc::Sender<Message>) -> Self {
        Fetcher {
            client,
            retries,
            waiting: VecDeque::new(),
            pause: RETRY_MIN,
        }
    }

    fn run(mut self, inbox: &mpsc::Receiver<Message>) {
        loop {
            let message = if self.waiting.is_empty() {
                inbox.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                inbox.recv_timeout(self.pause)
            };
            match message {
                Ok(Message::Fetch(fetch)) => self.waiting.push_back(fetch),
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {}
            }
            self.send_waiting();
        }
        let Fetcher {
            client, waiting, ..
        } = self;
        // Reads in flight fail as the client ends; those sent back meanwhile fail below.
        drop(client);
        let late = inbox.try_iter().filter_map(|m| match m {
            Message::Fetch(fetch) => Some(fetch),
            Message::Stop => None,
        });
        for fetch in waiting.into_iter().chain(late) {
            (fetch.done)(Err(-libc::EIO));
        }
    }

    /// Sends what waits if the connection is up (reconnecting once if not); fails what waited
    /// past its deadline.
    fn send_waiting(&mut self) {
        if !self.client.is_connected() {
            match self.client.reconnect() {
                Ok(()) => {
                    tracing::info!("NBD base: reconnected");
                    self.pause = RETRY_MIN;
                }
                Err(e) => {
                    crate::limited!(warn, "NBD base: cannot reconnect: {e}");
                    self.pause = (self.pause * 2).min(RETRY_MAX);
                    let now = Instant::now();
                    let (late, on_time): (VecDeque<_>, VecDeque<_>) =
                        self.waiting.drain(..).partition(|f| f.deadline <= now);
                    self.waiting = on_time;
                    for fetch in late {
                        (fetch.done)(Err(-libc::EIO));
                    }
                    return;
                }
            }
        }
        for fetch in self.waiting.drain(..) {
            let retries = self.retries.clone();
            let (offset, len) = (fetch.offset, fetch.len);
            self.client.submit(
                Command::Read { offset, len },
                Box::new(move |result| match result {
                    Ok(data) => (fetch.done)(Ok(data)),
                    // Tried again on the next connection, until its deadline.
                    Err(ClientError::Disconnected) if Instant::now() < fetch.deadline => {
                        if let Err(mpsc::SendError(Message::Fetch(fetch))) =
                            retries.send(Message::Fetch(fetch))
                        {
                            (fetch.done)(Err(-libc::EIO));
                        }
                    }
                    Err(e) => {
                        crate::limited!(warn, "NBD base: a read failed: {e}");
                        (fetch.done)(Err(-libc::EIO));
                    }
                }),
            );
        }
    }
}
