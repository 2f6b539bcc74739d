//! `--state FILE`: a disk added with `vbmq ctl --state FILE add-disk` (a `path=` image, its
//! socket outside the control socket's directory) is served again by a restarted vbmq (an
//! upgrade, `systemctl restart`) with what was written to it; one removed is not.

use crate::common::ctl::{listed_sockets as sockets, ok};
use crate::common::{Client, Daemon, Serve, ctl_state, image, pattern, s};
use std::path::Path;

fn serve(control: &Path, state: &Path) -> Daemon {
    Serve::new().control(control).opt("--state", state).start()
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
    ok(&ctl_state(&control, &state, &["add-disk", &spec]));
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
    client.assert_reads(0, 1 << 20, &data, "what was written before the restart");
    drop(client);
    ok(&ctl_state(&control, &state, &["remove-disk", s(&socket)]));
    assert!(daemon.terminate().success());

    let daemon = serve(&control, &state);
    assert!(sockets(&control).is_empty());
    assert!(daemon.terminate().success());
}
