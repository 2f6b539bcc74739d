//! The thrasher's load on a share (scripts/thrash/events/shares.py): a virtio-fs client that
//! holds the share's directory `moving` (one LOOKUP, its node kept across requests, as a guest's
//! dentry) and creates, releases and forgets files in it, while the host moves that directory out
//! of the share and back. Through a held node whose directory left the share, every change must
//! be refused (`ENOENT`); the thrasher checks that nothing outside the share changes.
//!
//! `thrash_share_client SOCKET`; until its stdin closes. A line `SYNC N` on stdin comes back on
//! stdout once the requests begun before it are answered. Lines on stdout:
//!
//! - `C share` connected (again, after vbmq restarted or the connection broke);
//! - `S CREATED REFUSED` every few rounds: files created in the held directory, and changes
//!   refused with `ENOENT` (the directory was out of the share, or not there), since the start;
//! - `SE WHAT` an answer no share may give (an errno other than `ENOENT`).

use std::io::{BufRead, Write};
use std::mem::size_of;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::Duration;

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, CreateIn, EntryOut, Opcode, ROOT_ID, ReleaseIn};

/// The directory of the share the host moves out and back.
const HELD: &str = "moving";
/// Names created in it, in turn: a bounded number of files.
const NAMES: u64 = 8;
/// Rounds between two `S` lines.
const REPORT: u64 = 25;
/// A reply not come by then: the backend is taken as gone and the client connects again (a
/// killed vbmq answers nothing; a slow one only costs a reconnection).
const REPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between rounds: load that leaves the 2 shared cores to vbmq and the guest.
const PACE: Duration = Duration::from_millis(20);

/// What a round met.
enum Outcome {
    Created,
    Refused,
    /// An errno no share may answer with here.
    Wrong(String),
}

/// A u64 at `at` of a reply's body (FUSE's structures are little-endian on x86).
fn word(body: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?))
}

/// One round: CREATE `name` in the held directory, then RELEASE and FORGET what it gave. A
/// transport failure (the connection is gone) is the `Err`.
fn round(client: &mut FsClient, held: u64, name: &str) -> std::io::Result<Outcome> {
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC) as u32,
        mode: 0o644,
        ..CreateIn::default()
    };
    let (out, body) = client.call(
        Opcode::Create,
        held,
        fuse::args(&create),
        &[name.as_bytes()],
        4096,
    )?;
    match -out.error {
        0 => {}
        libc::ENOENT => return Ok(Outcome::Refused),
        errno => return Ok(Outcome::Wrong(format!("CREATE {name}: errno {errno}"))),
    }
    let (Some(node), Some(fh)) = (word(&body, 0), word(&body, size_of::<EntryOut>())) else {
        return Ok(Outcome::Wrong(format!(
            "CREATE {name}: a reply of {} bytes",
            body.len()
        )));
    };
    let release = ReleaseIn {
        fh,
        ..ReleaseIn::default()
    };
    let (out, _) = client.call(Opcode::Release, node, fuse::args(&release), &[], 4096)?;
    if out.error != 0 {
        return Ok(Outcome::Wrong(format!("RELEASE: errno {}", -out.error)));
    }
    client.forget(node, 1)?;
    Ok(Outcome::Created)
}

/// Connects, waiting for the socket; then LOOKUP of the held directory (None while it is out).
fn connect(socket: &Path) -> FsClient {
    loop {
        if let Ok(mut client) = FsClient::connect(socket) {
            client.set_reply_timeout(REPLY_TIMEOUT);
            println!("C share");
            return client;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lines of stdin, read on a thread of their own: `None` once it closed.
fn stdin_lines() -> Receiver<Option<String>> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if send.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = send.send(None);
    });
    receive
}

fn main() {
    let Some(socket) = std::env::args().nth(1).map(PathBuf::from) else {
        eprintln!("usage: thrash_share_client SOCKET");
        std::process::exit(2);
    };
    let commands = stdin_lines();
    let mut client = connect(&socket);
    let mut held: Option<u64> = None;
    let (mut created, mut refused) = (0u64, 0u64);
    for turn in 0u64.. {
        loop {
            match commands.try_recv() {
                Ok(Some(line)) if line.starts_with("SYNC ") => println!("{line}"),
                Ok(Some(_)) | Err(TryRecvError::Empty) => break,
                Ok(None) | Err(TryRecvError::Disconnected) => return,
            }
        }
        // The node is looked up once and held; again only once the directory was not there.
        let node = match held {
            Some(node) => Ok(Some(node)),
            None => client
                .lookup(ROOT_ID, HELD)
                .map(|e| Some(e.nodeid))
                .or_else(|e| match e.raw_os_error() {
                    Some(libc::ENOENT) => Ok(None),
                    _ => Err(e),
                }),
        };
        let outcome = match node {
            Ok(Some(node)) => {
                held = Some(node);
                round(&mut client, node, &format!("f{}", turn % NAMES))
            }
            Ok(None) => Ok(Outcome::Refused),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(Outcome::Created) => created += 1,
            Ok(Outcome::Refused) => {
                refused += 1;
                // Through a held node that left the share: look the name up again next turn.
                if let Some(node) = held.take() {
                    let _ = client.forget(node, 1);
                }
            }
            Ok(Outcome::Wrong(what)) => println!("SE {what}"),
            Err(_) => {
                // The old connection is closed first: vbmq serves one frontend at a time on a
                // socket, so a new one connected beside it waits, unanswered, for as long as
                // the old stays open (the client then hung for good, vbmq saying nothing).
                drop(client);
                client = connect(&socket);
                held = None;
            }
        }
        if turn % REPORT == 0 {
            println!("S {created} {refused}");
        }
        let _ = std::io::stdout().flush();
        std::thread::sleep(PACE);
    }
}
