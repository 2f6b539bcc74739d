//! Local users against the files vbmq makes: an unprivileged user who connects as fast as it can
//! to every name that appears in the sockets' directory, while vbmq binds its control socket,
//! start-up disks, a share and run-time disks, never gets in; sockets get their configured mode
//! and group and lock files 0600; a symlink planted at a lock path is not followed; serving a
//! share leaves the process umask as it was, and the guest's modes are still applied exactly.

mod local_users {
    pub mod attacker;
    pub mod daemon;
    pub mod stall;
}

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::time::Duration;

use local_users::attacker::Attacker;
use local_users::daemon::{Control, Dirs, Vbmq, lock_of, mode_and_group, s};
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{Opcode, ROOT_ID};

/// A group other than root's, for `socket-group=` (`users`).
const GROUP: u32 = 100;

/// The usual umask: the share (which set the process umask to 0) must not open the sockets
/// bound after it, the run-time disks' above all.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root, to be nobody and to stall vbmq's calls (scripts/test.sh)"
)]
fn an_unprivileged_user_never_connects_while_vbmq_binds_its_sockets() {
    never_gets_in(0o022);
}

/// And whatever the operator's umask, no socket is ever open to others.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root, to be nobody and to stall vbmq's calls (scripts/test.sh)"
)]
fn an_unprivileged_user_never_connects_even_with_umask_0() {
    never_gets_in(0);
}

/// `nobody` tries every name in the sockets' directory while vbmq, started with `umask`, binds
/// its control socket, two disks, a share, then run-time disks 50 times. Every chmod, chown and
/// rename waits 5 ms, as on a busy host: a socket bound open to all before its chmod is found
/// every time.
fn never_gets_in(umask: libc::mode_t) {
    let dirs = Dirs::new();
    let attacker = Attacker::start(&dirs.run);
    let (control, a, b) = (dirs.run("ctl.sock"), dirs.run("a.sock"), dirs.run("b.sock"));
    let mut vbmq = Vbmq::start_stalled(
        &dirs,
        umask,
        &[
            "--control".into(),
            s(&control).into(),
            "--disk".into(),
            format!("socket={},null=1M", s(&a)),
            "--disk".into(),
            format!("socket={},null=1M,socket-mode=0660", s(&b)),
            "--fs".into(),
            dirs.share_spec(""),
        ],
        Some(Duration::from_millis(5)),
    )
    .serving(&[control.clone(), a, b, dirs.run("fs.sock")]);
    let mut client = Control::connect(&control);
    for round in 0..50 {
        let socket = dirs.run(&format!("r{}.sock", round % 4));
        let added = client.add_disk(&format!("socket={},null=1M", s(&socket)));
        assert_eq!(added["ok"], true, "round {round}: {added} {}", vbmq.log());
        let removed = client.remove_disk(&socket);
        assert_eq!(removed["ok"], true, "round {round}: {removed}");
    }
    assert!(vbmq.alive(), "{}", vbmq.log());
    assert!(vbmq.stalled() >= 50, "the stalls never happened");
    let outcome = attacker.stop();
    assert_eq!(
        (outcome.connected, outcome.exchanged),
        (0, 0),
        "nobody got into {}: {outcome:?}",
        outcome.first_in
    );
    // It saw the files and was turned away by their permissions.
    assert!(
        outcome.attempts > 0 && outcome.names_seen >= 5,
        "{outcome:?}"
    );
    assert!(outcome.refused > 0, "{outcome:?}");
}

#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root, to give sockets a group of its choice (scripts/test.sh)"
)]
fn sockets_and_lock_files_get_their_configured_modes() {
    let dirs = Dirs::new();
    let (control, a, b, old) = (
        dirs.run("ctl.sock"),
        dirs.run("a.sock"),
        dirs.run("b.sock"),
        dirs.run("old.sock"),
    );
    // An older vbmq's lock file, world-writable, is made 0600.
    std::fs::write(lock_of(&old), b"").unwrap();
    std::fs::set_permissions(lock_of(&old), std::fs::Permissions::from_mode(0o666)).unwrap();
    let group = format!(",socket-mode=0660,socket-group={GROUP}");
    let vbmq = Vbmq::start(
        &dirs,
        0o022,
        &[
            "--control".into(),
            s(&control).into(),
            "--disk".into(),
            format!("socket={},null=1M", s(&a)),
            "--disk".into(),
            format!("socket={},null=1M{group}", s(&b)),
            "--disk".into(),
            format!("socket={},null=1M", s(&old)),
            "--fs".into(),
            dirs.share_spec(&format!(",socket-mode=0640,socket-group={GROUP}")),
        ],
    )
    .serving(&[control.clone(), a.clone(), b.clone(), old.clone()]);
    // Bits the umask would take away are set all the same.
    let r = dirs.run("r.sock");
    let added = Control::connect(&control).add_disk(&format!(
        "socket={},null=1M,socket-mode=0666,socket-group={GROUP}",
        s(&r)
    ));
    assert_eq!(added["ok"], true, "{added} {}", vbmq.log());
    let fs = dirs.run("fs.sock");
    for (socket, mode, group) in [
        (&control, 0o600, 0),
        (&a, 0o600, 0),
        (&b, 0o660, GROUP),
        (&old, 0o600, 0),
        (&fs, 0o640, GROUP),
        (&r, 0o666, GROUP),
    ] {
        assert_eq!(mode_and_group(socket), (mode, group, true), "{}", s(socket));
    }
    for socket in [&a, &b, &old, &fs, &r] {
        let lock = lock_of(socket);
        let metadata = std::fs::symlink_metadata(&lock).unwrap();
        assert!(metadata.is_file(), "{}", s(&lock));
        assert_eq!(metadata.mode() & 0o7777, 0o600, "{}", s(&lock));
    }
    // No temporary name is left behind.
    let names: Vec<String> = std::fs::read_dir(&dirs.run)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

#[test]
fn a_symlink_at_a_lock_path_is_not_followed() {
    let dirs = Dirs::new();
    let victim = dirs.top.join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let absent = dirs.top.join("absent");
    // A start-up disk: vbmq refuses to start, and neither target is touched.
    for (name, target) in [("a.sock", &victim), ("b.sock", &absent)] {
        let socket = dirs.run(name);
        symlink(target, lock_of(&socket)).unwrap();
        let mut vbmq = Vbmq::start(
            &dirs,
            0o022,
            &["--disk".into(), format!("socket={},null=1M", s(&socket))],
        );
        assert!(!vbmq.exit().success(), "served {name}: {}", vbmq.log());
        assert!(vbmq.log().contains("lock"), "{}", vbmq.log());
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    assert_eq!(mode_and_group(&victim).0, 0o644);
    assert!(
        std::fs::symlink_metadata(&absent).is_err(),
        "the link was followed"
    );
    // A run-time disk: refused, and vbmq goes on serving.
    let control = dirs.run("ctl.sock");
    let mut vbmq = Vbmq::start(&dirs, 0o022, &["--control".into(), s(&control).into()])
        .serving(std::slice::from_ref(&control));
    let c = dirs.run("c.sock");
    symlink(&absent, lock_of(&c)).unwrap();
    let mut client = Control::connect(&control);
    let refused = client.add_disk(&format!("socket={},null=1M", s(&c)));
    assert_eq!(refused["ok"], false, "{refused} {}", vbmq.log());
    assert!(
        std::fs::symlink_metadata(&absent).is_err(),
        "the link was followed"
    );
    assert!(vbmq.alive(), "{}", vbmq.log());
    std::fs::remove_file(lock_of(&c)).unwrap();
    let added = client.add_disk(&format!("socket={},null=1M", s(&c)));
    assert_eq!(added["ok"], true, "{added} {}", vbmq.log());
}

/// A FUSE request's arguments: 32-bit words.
fn words(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

#[test]
fn a_share_leaves_the_process_umask_alone_and_applies_the_guests() {
    let dirs = Dirs::new();
    let vbmq = Vbmq::start(&dirs, 0o027, &["--fs".into(), dirs.share_spec("")])
        .serving(&[dirs.run("fs.sock")]);
    let mut client = FsClient::connect(&dirs.run("fs.sock")).unwrap();
    // The guest's mode less the guest's umask, whatever vbmq's own umask (027) would take.
    let requests: [(Opcode, Vec<u8>, &str); 3] = [
        // CreateIn: flags, mode, umask, open flags.
        (
            Opcode::Create,
            words(&[libc::O_RDWR as u32, libc::S_IFREG | 0o666, 0, 0]),
            "file",
        ),
        // MkdirIn: mode, umask.
        (Opcode::Mkdir, words(&[0o777, 0o022]), "dir"),
        // MknodIn: mode, rdev, umask, padding.
        (
            Opcode::Mknod,
            words(&[libc::S_IFIFO | 0o666, 0, 0o002, 0]),
            "fifo",
        ),
    ];
    for (opcode, args, name) in &requests {
        let (out, _) = client
            .call(*opcode, ROOT_ID, args, &[name.as_bytes()], 4096)
            .unwrap();
        assert_eq!(out.error, 0, "{name}");
    }
    let share = dirs.top.join("share");
    for (name, mode) in [("file", 0o666), ("dir", 0o755), ("fifo", 0o664)] {
        assert_eq!(mode_and_group(&share.join(name)).0, mode, "{name}");
    }
    // The process keeps its umask: only the share's queue threads have one of their own.
    let umask_of = |status: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Umask:"))
            .map(|value| value.trim().to_string())
    };
    let status = std::fs::read_to_string(format!("/proc/{}/status", vbmq.pid())).unwrap();
    assert_eq!(umask_of(&status).as_deref(), Some("0027"), "{status}");
    for task in std::fs::read_dir(format!("/proc/{}/task", vbmq.pid())).unwrap() {
        let task = task.unwrap().path();
        let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        if !name.starts_with("vbmq-fs-q") && !status.is_empty() {
            assert_eq!(umask_of(&status).as_deref(), Some("0027"), "{name}");
        }
    }
}
