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

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(args)
        .output()
        .expect("run vbmq");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn serve_help_lists_every_disk_key_with_its_default() {
    let (code, help, _) = run(&["serve", "--help"]);
    assert_eq!(code, 0);
    for key in vbmq::config::DISK_KEYS {
        let form = format!("{}={}", key.name, key.value);
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&form))
            .unwrap_or_else(|| panic!("{form} missing from serve --help:\n{help}"));
        if let Some(default) = key.default {
            assert!(line.contains(&format!("[default: {default}]")), "{line}");
        }
    }
    assert!(help.contains("--seccomp"), "{help}");
}

#[test]
fn bench_and_top_level_help_describe_every_flag() {
    let (code, help, _) = run(&["bench", "--help"]);
    assert_eq!(code, 0);
    for flag in ["--quick", "--out <DIR>", "--only <TEXT>"] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
    let (code, help, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("serve") && help.contains("bench"), "{help}");
}

#[test]
fn argument_errors_are_one_line_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["serve", "--foo"], "'--foo'"),
        (&["serve", "--disk"], "--disk"),
        (&["serve"], "--disk"),
        (
            &["serve", "--disk", "socket=/s,null=1G", "--seccomp=maybe"],
            "--seccomp",
        ),
        (&["bench", "--only"], "--only"),
        (&["bench", "--fast"], "'--fast'"),
        (&["frobnicate"], "'frobnicate'"),
    ];
    for (args, flag) in cases {
        let (code, _, stderr) = run(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("vbmq: ") && stderr.contains(flag),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn seccomp_takes_a_separate_value_too() {
    // Parsed as `--seccomp off`; the disk error then proves the flag itself was accepted.
    let (code, _, stderr) = run(&[
        "serve",
        "--seccomp",
        "off",
        "--disk",
        "socket=/s,null=1G,queues=0",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--disk queues:"), "{stderr}");
}
