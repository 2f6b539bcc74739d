//! Command-line errors: one line naming the key, exit status 2.

use std::process::Command;

fn serve(disks: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
    cmd.arg("serve");
    for disk in disks {
        cmd.arg("--disk").arg(disk);
    }
    let out = cmd.output().expect("run vbmq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_disks_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let sock = sock.display();
    let cases: Vec<(String, &str)> = vec![
        ("path=/nonexistent".into(), "socket"),
        (format!("socket={sock}"), "path"),
        (format!("socket={sock},path=/nonexistent/x.raw"), "path"),
        (format!("socket={sock},null=12Q"), "null"),
        (format!("socket={sock},null=1G,queues=0"), "queues"),
        (format!("socket={sock},null=1G,queues=100"), "queues"),
        (format!("socket={sock},null=1G,queue-size=3"), "queue-size"),
        (format!("socket={sock},null=1G,mode=fast"), "mode"),
        (format!("socket={sock},null=1G,mode=poll"), "cpus"),
        (format!("socket={sock},null=1G,cpus=4096"), "cpus"),
        (format!("socket={sock},null=1G,queues=2,cpus=0"), "cpus"),
        (
            format!("socket={sock},null=1G,readonly=perhaps"),
            "readonly",
        ),
        (format!("socket={sock},null=1G,flavour=mint"), "flavour"),
    ];
    for (disk, key) in cases {
        let (code, stderr) = serve(&[&disk]);
        assert_eq!(code, 2, "{disk}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{disk}: {stderr}");
        assert!(
            stderr.contains(&format!("--disk {key}:")),
            "{disk}: {stderr}"
        );
    }
}

#[test]
fn two_polling_threads_on_one_cpu_across_disks() {
    let dir = tempfile::tempdir().unwrap();
    let a = format!(
        "socket={},null=1G,mode=poll,cpus=0",
        dir.path().join("a").display()
    );
    let b = format!(
        "socket={},null=1G,mode=poll,cpus=0",
        dir.path().join("b").display()
    );
    let (code, stderr) = serve(&[&a, &b]);
    assert_eq!(code, 2);
    assert!(stderr.contains("--disk cpus:"), "{stderr}");
}

#[test]
fn a_socket_held_by_a_live_vbmq_is_refused_and_a_stale_one_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    // A stale socket file (no process behind it) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let spec = format!("socket={},null=1G", path.display());
    let mut first = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--disk", &spec])
        .spawn()
        .unwrap();
    let lock = dir.path().join("s.sock.lock");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !lock.exists() || std::os::unix::net::UnixStream::connect(&path).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "first vbmq never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (code, stderr) = serve(&[&spec]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--disk socket:"), "{stderr}");
    assert!(first.try_wait().unwrap().is_none(), "first vbmq died");
    first.kill().unwrap();
    first.wait().unwrap();
}
