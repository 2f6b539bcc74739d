//! `vbmq ctl`: one request to a running `vbmq serve --control PATH`, its reply on stdout.

use std::io::{BufRead, BufReader};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use crate::control::protocol::{Reply, Versioned};

/// A request and where to send it.
pub struct Request {
    /// The control socket.
    pub control: PathBuf,
    /// The request.
    pub command: crate::control::Request,
}

/// Sends the request; prints the result as JSON (exit 0) or the error as one line (exit 2;
/// exit 1 when the daemon cannot be reached). `add-fs` first opens the directory and binds the
/// socket, and sends them with the request; `remove-fs` removes the socket's files after.
pub fn run(request: &Request) -> i32 {
    use crate::control::Request as Command;
    let opened = match &request.command {
        Command::AddFs { spec } => match crate::ctl_fs::open_share(spec) {
            Ok(opened) => Some(opened),
            Err(e) => {
                eprintln!("vbmq: {e}");
                return 2;
            }
        },
        _ => None,
    };
    let fds = opened
        .as_ref()
        .map(|o| o.fds().to_vec())
        .unwrap_or_default();
    let reply = exchange(request, &fds);
    drop(fds);
    let done = reply.as_ref().is_ok_and(|reply| reply.ok);
    if let Some(opened) = opened
        && !done
    {
        opened.discard();
    }
    if let (Command::RemoveFs { socket }, true) = (&request.command, done) {
        crate::ctl_fs::remove_files(std::path::Path::new(socket));
    }
    let reply = match reply {
        Ok(reply) => reply,
        Err(e) => {
            eprintln!("vbmq: {}: {e}", request.control.display());
            return 1;
        }
    };
    if !reply.ok {
        eprintln!("vbmq: {}", reply.error.as_deref().unwrap_or("failed"));
        return 2;
    }
    match reply.result {
        None | Some(crate::control::protocol::Answer::Nothing) => {}
        Some(result) => println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        ),
    }
    0
}

fn exchange(request: &Request, fds: &[BorrowedFd<'_>]) -> std::io::Result<Reply> {
    let stream = UnixStream::connect(&request.control)?;
    let body = Versioned {
        version: crate::control::VERSION,
        request: &request.command,
    };
    let mut line = serde_json::to_vec(&body).map_err(std::io::Error::other)?;
    line.push(b'\n');
    crate::control::passed_fds::send(&stream, &line, fds)?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}
