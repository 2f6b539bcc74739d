//! The control socket: bound before confinement, served after it.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use vbmq::host::Host;

use super::answer::answer;
use super::protocol::Reply;

/// The longest request line; a longer one gets an error and the connection is closed.
pub const MAX_REQUEST: usize = 64 * 1024;
/// How long a client has to send a whole request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Clients served at once; more are answered with an error and closed.
const MAX_CLIENTS: usize = 16;

/// The directory of a control socket, where run-time disks' sockets go.
pub fn socket_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A bound control socket, not yet served.
pub struct Server {
    listener: UnixListener,
}

impl Server {
    /// Creates the socket's directory (0755) if missing and binds the socket (0600), replacing
    /// a stale socket file.
    pub fn bind(path: &Path) -> io::Result<Self> {
        let dir = socket_dir(path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)?;
        if std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "a running vbmq serves this control socket",
                ));
            }
            std::fs::remove_file(path)?;
        }
        // Owner-only from its bind on, and at its path only once listening.
        let listener = vbmq::socket_files::bind_listener(path, 0o600, None)?;
        Ok(Server { listener })
    }

    /// What `serve` calls once confined: serves the socket on its own thread.
    pub fn starter(self) -> vbmq::serve::ControlStart {
        Box::new(move |host: Arc<Host>| {
            let spawned = std::thread::Builder::new()
                .name("vbmq-control".into())
                .spawn(move || self.run(&host));
            if let Err(e) = spawned {
                eprintln!("vbmq: cannot start the control thread: {e}");
            }
        })
    }

    fn run(self, host: &Arc<Host>) {
        let clients = Arc::new(AtomicUsize::new(0));
        for stream in self.listener.incoming() {
            let Ok(mut stream) = stream else {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                clients.fetch_sub(1, Ordering::AcqRel);
                let _ = stream.set_nonblocking(true);
                let _ = reply(&mut stream, &Reply::refused("too many control clients"));
                continue;
            }
            let (host, count) = (Arc::clone(host), Arc::clone(&clients));
            let spawned = std::thread::Builder::new()
                .name("vbmq-ctl-client".into())
                .spawn(move || {
                    serve_client(&host, stream);
                    count.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                clients.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// Answers request lines until the client closes, stalls past the deadline or oversteps.
fn serve_client(host: &Host, mut stream: UnixStream) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    // Whose files the client may pass as a disk's map, changes or key file (besides root's).
    let client_uid = match client_uid(&stream) {
        Ok(uid) => uid,
        Err(e) => {
            let error = format!("cannot tell the client's user (SO_PEERCRED): {e}");
            let _ = reply(&mut stream, &Reply::refused(error));
            return;
        }
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        let line = match read_line(&mut stream, &mut pending, &mut fds) {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(error) => {
                let _ = reply(&mut stream, &Reply::refused(error));
                return;
            }
        };
        // The descriptors that came while the line was read are its request's.
        let fds = std::mem::take(&mut fds);
        if reply(&mut stream, &answer(host, &line, fds, client_uid)).is_err() {
            return;
        }
    }
}

/// The user the process at the other end of `stream` ran as when it connected.
fn client_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(size_of::<libc::ucred>()).unwrap_or(0);
    // SAFETY: getsockopt writes at most `len` bytes into the local `cred`.
    let ret = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// The next line (without its newline), `None` at a clean end, or why the client is dropped;
/// the descriptors sent meanwhile are added to `fds`.
fn read_line(
    stream: &mut UnixStream,
    pending: &mut Vec<u8>,
    fds: &mut Vec<OwnedFd>,
) -> Result<Option<Vec<u8>>, String> {
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line = pending.drain(..=end).take(end).collect();
            return Ok(Some(line));
        }
        if pending.len() > MAX_REQUEST {
            return Err(format!("request longer than {MAX_REQUEST} bytes"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no complete request within {} s",
                REQUEST_TIMEOUT.as_secs()
            ));
        }
        wait(stream, libc::POLLIN, left);
        match super::passed_fds::recv(stream, &mut buf, fds) {
            Ok(0) if pending.is_empty() => return Ok(None),
            Ok(0) => return Err("request ended without a newline".into()),
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e.to_string()),
            Err(_) => return Ok(None),
        }
    }
}

/// Writes one reply line, giving a client that does not read a bounded time.
fn reply(stream: &mut UnixStream, reply: &Reply) -> io::Result<()> {
    let mut text = serde_json::to_vec(reply).map_err(io::Error::other)?;
    text.push(b'\n');
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut written = 0;
    while written < text.len() {
        match stream.write(&text[written..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                wait(stream, libc::POLLOUT, left);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn wait(stream: &UnixStream, events: libc::c_short, left: Duration) {
    crate::fd_wait::wait(stream.as_raw_fd(), events, left);
}
