//! `--state FILE`: a disk added with `vbmq ctl --state FILE add-disk` (a `path=` image, its
//! socket outside the control socket's directory) is served again by a restarted vbmq (an
//! upgrade, `systemctl restart`) with what was written to it; one removed is not.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{Client, Daemon, ctl, image, pattern, wait_for};

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn serve(control: &Path, state: &Path) -> Daemon {
    let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--control", s(control), "--state", s(state)])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(control);
    Daemon { child }
}

fn sockets(control: &Path) -> Vec<String> {
    let out = ctl(control, &["list"]);
    assert!(out.status.success());
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entries = list.as_array().unwrap();
    entries
        .iter()
        .map(|d| d["socket"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_disk_added_at_run_time_is_served_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/ctl.sock");
    let state = dir.path().join("state/run-time-disks.toml");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    let file = image(dir.path(), "vm3.raw", 4 << 20, 9);
    let socket = dir.path().join("vm3/disk.sock");
    let spec = format!("socket={},path={}", s(&socket), s(&file));

    let daemon = serve(&control, &state);
    let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args([
            "ctl",
            "--control",
            s(&control),
            "--state",
            s(&state),
            "add-disk",
            &spec,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = pattern(33, 64 << 10);
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 1 << 20, &data), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());

    // The new process opens the image and binds the socket itself, at start.
    let daemon = serve(&control, &state);
    assert_eq!(sockets(&control), vec![s(&socket).to_string()]);
    let mut client = Client::connect(&socket, 1, false).expect("reconnect");
    let (ret, back) = client.read(0, 1 << 20, data.len());
    assert_eq!(ret, 0);
    assert!(back == data, "what was written before the restart");
    drop(client);
    let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args([
            "ctl",
            "--control",
            s(&control),
            "--state",
            s(&state),
            "remove-disk",
            s(&socket),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(daemon.terminate().success());

    let daemon = serve(&control, &state);
    assert!(sockets(&control).is_empty());
    assert!(daemon.terminate().success());
}
