//! `vbmq serve --config FILE`: the disks and settings of a TOML file; SIGHUP or `vbmq ctl
//! reload` applies a changed file as removal and addition of the disks that changed, and a bad
//! file changes nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::ctl::{listed_sockets as sockets, ok, write_config};
use crate::common::{Serve, ctl};

#[test]
fn a_changed_file_is_applied_on_sighup_and_reload_and_a_bad_one_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let control = run.join("ctl.sock");
    let (a, b) = (run.join("a.sock"), run.join("b.sock"));
    let disk = |socket: &Path| format!("socket={},null=1G,queues=2", socket.display());
    let conf_dir = dir.path().join("etc");
    std::fs::create_dir_all(&conf_dir).unwrap();
    let file = conf_dir.join("vbmq.toml");
    write_config(&file, &control, &[disk(&a)]);
    let daemon = Serve::config(&file, &[&control, &a]).start();
    assert_eq!(sockets(&control), vec![a.display().to_string()]);

    // SIGHUP: A out, B in.
    write_config(&file, &control, &[disk(&b)]);
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(daemon.child.id().cast_signed(), libc::SIGHUP) };
    let start = Instant::now();
    // B is added before A goes (a reload adds first: an add that fails changes nothing), and
    // A leaves the list before its files are removed.
    while sockets(&control) != vec![b.display().to_string()] || a.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "SIGHUP not applied"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!a.exists() && b.exists());

    // A file that does not parse, or holds a bad disk: refused, nothing changes.
    std::fs::write(&file, "disk = [\"socket=/x,null=1G\"]\nspeed = 1\n").unwrap();
    let out = ctl(&control, &["reload"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    write_config(
        &file,
        &control,
        &[format!("socket={},null=1G,queues=0", a.display())],
    );
    let out = ctl(&control, &["reload"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("queues"));
    assert_eq!(sockets(&control), vec![b.display().to_string()]);

    // `vbmq ctl reload`: both.
    write_config(&file, &control, &[disk(&b), disk(&a)]);
    let out = ctl(&control, &["reload"]);
    ok(&out);
    assert_eq!(
        sockets(&control),
        vec![b.display().to_string(), a.display().to_string()]
    );
    assert!(daemon.terminate().success());
}
