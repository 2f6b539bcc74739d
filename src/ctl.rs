//! `vbmq ctl`: one request to a running `vbmq serve --control PATH`, its reply on stdout.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use serde_json::{Value, json};

/// What `vbmq ctl` asks.
pub enum Command {
    /// Serve one more disk (a `--disk` text).
    AddDisk(String),
    /// Stop the disk on this socket.
    RemoveDisk(PathBuf),
    /// Change a disk's capacity: socket, size text (`40G`), and whether it may shrink.
    Resize(PathBuf, String, bool),
    /// Set a disk's I/O limits: socket, `iops=N,bps=SIZE,...` or `none`.
    SetLimits(PathBuf, String),
    /// Read the configuration file again and apply what changed.
    Reload,
    /// Every disk.
    List,
    /// Counters of every disk or one.
    Stats(Option<PathBuf>),
}

/// A request and where to send it.
pub struct Request {
    /// The control socket.
    pub control: PathBuf,
    /// The request.
    pub command: Command,
}

/// Sends the request; prints the result as JSON (exit 0) or the error as one line (exit 2;
/// exit 1 when the daemon cannot be reached).
pub fn run(request: &Request) -> i32 {
    let body = match &request.command {
        Command::AddDisk(spec) => json!({"command": "add-disk", "spec": spec}),
        Command::RemoveDisk(socket) => {
            json!({"command": "remove-disk", "socket": socket.display().to_string()})
        }
        Command::Resize(socket, size, force) => json!({
            "command": "resize",
            "socket": socket.display().to_string(),
            "size": size,
            "force": force,
        }),
        Command::SetLimits(socket, limits) => json!({
            "command": "set-limits",
            "socket": socket.display().to_string(),
            "limits": limits,
        }),
        Command::Reload => json!({"command": "reload"}),
        Command::List => json!({"command": "list"}),
        Command::Stats(None) => json!({"command": "stats"}),
        Command::Stats(Some(socket)) => {
            json!({"command": "stats", "socket": socket.display().to_string()})
        }
    };
    let mut body = body;
    body["version"] = json!(crate::control::VERSION);
    let reply = match exchange(request, &body) {
        Ok(reply) => reply,
        Err(e) => {
            eprintln!("vbmq: {}: {e}", request.control.display());
            return 1;
        }
    };
    if reply.get("ok").and_then(Value::as_bool) == Some(true) {
        let result = reply.get("result").cloned().unwrap_or(Value::Null);
        if !result.is_null() {
            println!(
                "{}",
                serde_json::to_string_pretty(&result).unwrap_or_default()
            );
        }
        0
    } else {
        let error = reply
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("failed");
        eprintln!("vbmq: {error}");
        2
    }
}

fn exchange(request: &Request, body: &Value) -> std::io::Result<Value> {
    let mut stream = UnixStream::connect(&request.control)?;
    let mut line = body.to_string();
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}
