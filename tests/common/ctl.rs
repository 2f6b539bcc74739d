//! Control requests through `vbmq ctl`, and what their answers hold.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A path as the `&str` a spec or a command line takes.
pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs `vbmq ctl --control CONTROL ARGS...`.
pub fn ctl(control: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .arg("ctl")
        .arg("--control")
        .arg(control)
        .args(args)
        .output()
        .expect("run vbmq ctl")
}

/// Asserts the command succeeded; its stdout.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts the command failed with `reason` on stderr.
pub fn refused(out: &Output, reason: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted; wanted refused: {reason}");
    assert!(err.contains(reason), "{err:?} lacks {reason:?}");
}

/// `vbmq ctl ARGS`, which must succeed: its output.
fn ctl_succeeding(control: &Path, args: &[&str]) -> Output {
    let out = ctl(control, args);
    assert!(
        out.status.success(),
        "vbmq ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `vbmq ctl ARGS`, which must succeed: the JSON it prints.
pub fn ctl_json(control: &Path, args: &[&str]) -> Value {
    serde_json::from_slice(&ctl_succeeding(control, args).stdout).expect("JSON on stdout")
}

/// As [`ctl_json`], for requests that may print nothing (null then).
pub fn ctl_json_or_null(control: &Path, args: &[&str]) -> Value {
    let out = ctl_succeeding(control, args);
    if out.stdout.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// The entries of `vbmq ctl list`.
pub fn list(control: &Path) -> Vec<Value> {
    serde_json::from_str::<Value>(&ok(&ctl(control, &["list"])))
        .expect("JSON")
        .as_array()
        .expect("a list")
        .clone()
}

/// The sockets of every disk and share `vbmq ctl list` shows.
pub fn listed_sockets(control: &Path) -> Vec<String> {
    list(control)
        .iter()
        .map(|d| d["socket"].as_str().unwrap().to_string())
        .collect()
}

/// The JSON of `vbmq ctl stats SOCKET`: this disk's engine counter `name`.
pub fn engine_stat(control: &Path, socket: &Path, name: &str) -> u64 {
    let out = ctl(control, &["stats", s(socket)]);
    ok(&out);
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    stats[0]["engine"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

/// Waits until the disk on `socket` has requests in flight (`vbmq ctl stats`: the guest's I/O is
/// under way), so that a stop right after finds some to resubmit. A fixed pause is the wrong
/// thing to wait for: a guest on a loaded machine may not have begun its I/O by then.
pub fn wait_for_requests_in_flight(control: &Path, socket: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let stats = ctl_json(control, &["stats", s(socket)]);
        let in_flight: u64 = stats[0]["queues"]
            .as_array()
            .map(|queues| queues.iter().filter_map(|q| q["in_flight"].as_u64()).sum())
            .unwrap_or(0);
        if in_flight > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no request in flight on {} within {timeout:?}: {stats}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Each reply refused with its expected reason, and the daemon still alive after it.
pub fn each_refused(cases: &[(Value, &str)], daemon: &mut super::Daemon) {
    for (reply, expected) in cases {
        assert_eq!(reply["ok"], false, "{reply}");
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{error:?} lacks {expected:?}");
        assert!(daemon.alive());
    }
}

/// A configuration file with a control socket and these `--disk` specs.
pub fn write_config(file: &Path, control: &Path, disks: &[String]) {
    let disks: Vec<String> = disks.iter().map(|d| format!("    \"{d}\",")).collect();
    let text = format!(
        "control = \"{}\"\ndisk = [\n{}\n]\n",
        s(control),
        disks.join("\n")
    );
    std::fs::write(file, text).unwrap();
}

/// A TCP port free at the time of asking, for `--metrics`.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The whole reply to `GET PATH` on `127.0.0.1:PORT`.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

/// The value of the sample line that starts with `prefix`, if there is one.
pub fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .and_then(|rest| rest.trim().parse().ok())
}

/// `vbmq ctl --control CONTROL --state STATE ARGS...`.
pub fn ctl_state(control: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["ctl", "--control", s(control), "--state", s(state)])
        .args(args)
        .output()
        .expect("run vbmq ctl")
}
