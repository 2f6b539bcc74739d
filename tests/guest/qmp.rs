//! A QMP client for the tests that drive QEMU itself (migration): one command at a time.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// The socket, named in panics (the test prints the QEMUs' logs).
    path: PathBuf,
}

impl Qmp {
    /// Connects to QEMU's `-qmp unix:PATH,server=on,wait=off` socket (waiting for it to appear)
    /// and leaves capabilities negotiation.
    pub fn connect(path: &Path) -> Qmp {
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(stream) => break stream,
                Err(e) if start.elapsed() < Duration::from_secs(30) => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("cannot connect to QMP at {}: {e}", path.display()),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            path: path.to_path_buf(),
        };
        let greeting = qmp.read();
        assert!(
            greeting.get("QMP").is_some(),
            "not a QMP greeting: {greeting}"
        );
        qmp.execute("qmp_capabilities", json!({}));
        qmp
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        let n = self
            .reader
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("QMP read from {}: {e}", self.path.display()));
        assert!(
            n > 0,
            "QMP {}: QEMU closed the connection",
            self.path.display()
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad QMP line {line:?}: {e}"))
    }

    /// Asks QEMU to quit; the caller then waits for the process to end. A QEMU already gone
    /// (the connection closed: a migration source has been seen to end by itself, status 0,
    /// right after the migration completed) is said, not a failure: the process's end is what
    /// the caller checks.
    pub fn quit(&mut self) {
        let request = json!({ "execute": "quit", "arguments": {} });
        let mut line = String::new();
        let sent = writeln!(self.writer, "{request}").and_then(|()| self.writer.flush());
        if sent.is_err() || self.reader.read_line(&mut line).is_err() {
            eprintln!(
                "QMP quit to {}: QEMU had closed the connection already",
                self.path.display()
            );
        }
    }

    /// Runs a command and returns its `return` value; panics on a QMP error.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Value {
        match self.try_execute(command, arguments) {
            Ok(value) => value,
            Err(error) => panic!("QMP {command}: {error}"),
        }
    }

    /// Runs a command: its `return` value, or its `error`.
    pub fn try_execute(&mut self, command: &str, arguments: Value) -> Result<Value, Value> {
        let request = json!({ "execute": command, "arguments": arguments });
        writeln!(self.writer, "{request}")
            .unwrap_or_else(|e| panic!("QMP {command} to {}: {e}", self.path.display()));
        loop {
            let mut reply = self.read();
            if reply.get("event").is_some() {
                continue;
            }
            if let Some(value) = reply.get_mut("return") {
                return Ok(value.take());
            }
            return Err(reply.get("error").cloned().unwrap_or(reply));
        }
    }
}
