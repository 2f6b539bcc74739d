//! `vbmq ctl`: one request to a running `vbmq serve --control PATH`, its reply on stdout.

use std::io::{BufRead, BufReader, Write};
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
/// exit 1 when the daemon cannot be reached).
pub fn run(request: &Request) -> i32 {
    let reply = match exchange(request) {
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

fn exchange(request: &Request) -> std::io::Result<Reply> {
    let mut stream = UnixStream::connect(&request.control)?;
    let body = Versioned {
        version: crate::control::VERSION,
        request: &request.command,
    };
    let mut line = serde_json::to_vec(&body).map_err(std::io::Error::other)?;
    line.push(b'\n');
    stream.write_all(&line)?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}
