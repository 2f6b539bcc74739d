//! Live migration of a running Linux guest with a virtio-fs share mounted and a file held open:
//! one backend process per side (source and destination) sharing the same host directory,
//! QEMU's `vhost-user-fs-pci` carrying the backend's state (`SET_DEVICE_STATE_FD`) in its
//! migration stream. The guest writes through one open descriptor before, during and after the
//! migration and reads everything back through another opened before it; the host checks the
//! file. virtiofsd migrates the same guest as the reference (its `find-paths` mode), and the
//! downtime of each is printed. A guest also holding a file deleted while open migrates to a
//! destination with `migration-on-error=guest-error`: that file alone answers errors there.

mod guest;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use guest::{
    Qmp, RunningVm, TestDir, Vbmq, Vm, print_log, read_consoles, result_of, script, tagged,
};

/// Lines the guest writes once it sees it runs on the destination.
const AFTER: u32 = 100;

const GUEST: &str = r#"
mount -t virtiofs share /mnt
mkdir -p /mnt/dir
cd /mnt/dir
# Held across the migration: the directory (the shell's cwd), one descriptor written, one read.
exec 3<>held
exec 4<held
# With Held::Deleted, also a file deleted while held: no path leads to it any more.
if [ @DELETED@ = 1 ]; then
    echo gone >gone
    exec 5<>gone
    rm gone
fi
n=0
write() { n=$((n + 1)); echo "line $n" >&3; }
write
echo WRITING
# Writes go on while QEMU migrates, until the host says the guest runs on the destination.
while [ ! -e /mnt/migrated ]; do write; done
echo "MIGRATED-AT $n"
if [ @DELETED@ = 1 ]; then
    if echo x >&5; then echo "LOST-WRITE ok"; else echo "LOST-WRITE failed"; fi
    exec 5>&-
fi
i=0
while [ $i -lt AFTER ]; do write; i=$((i + 1)); done
cat <&4 >/tmp/read
echo "LINES $(wc -l </tmp/read)"
echo "GUEST-SUM $(md5sum </tmp/read | cut -d' ' -f1)"
exec 3>&- 4<&-
cd /
umount /mnt
"#;

/// What serves the share.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Backend {
    Vbmq,
    Virtiofsd,
}

/// One backend process serving `shared` on `socket` (`extra`: more of vbmq's `--fs` keys).
fn serve(
    backend: Backend,
    dir: &TestDir,
    socket: &Path,
    shared: &Path,
    log: &str,
    extra: &str,
) -> Vbmq {
    match backend {
        Backend::Vbmq => {
            let spec = format!(
                "socket={},dir={},tag=share,queues=1{extra}",
                socket.display(),
                shared.display()
            );
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_vbmq"));
            cmd.args(["serve", "--fs", &spec]).env("RUST_LOG", "info");
            Vbmq::spawn(cmd, vec![socket.to_path_buf()], dir.join(log))
        }
        Backend::Virtiofsd => {
            let mut cmd = Command::new("virtiofsd");
            cmd.arg("--socket-path")
                .arg(socket)
                .arg("--shared-dir")
                .arg(shared)
                .args(["--sandbox", "none", "--migration-mode", "find-paths"]);
            Vbmq::spawn(cmd, vec![socket.to_path_buf()], dir.join(log))
        }
    }
}

struct Side {
    vm: RunningVm,
    qmp: Qmp,
}

/// Starts a QEMU with the share on `socket`; `incoming`: waiting for a migration on `from`.
fn qemu(dir: &TestDir, n: usize, initrd: &Path, socket: &Path, incoming: Option<&Path>) -> Side {
    let qmp = dir.join(&format!("qmp{n}.sock"));
    let console = dir.join(&format!("console{n}.log"));
    let mut extra = vec![
        "-qmp".to_string(),
        format!("unix:{},server=on,wait=off", qmp.display()),
    ];
    if let Some(from) = incoming {
        extra.push("-incoming".into());
        extra.push(format!("unix:{}", from.display()));
    }
    let vm = Vm::new(1)
        .share(socket, "share", 1)
        .start(initrd, &console, &extra);
    Side {
        vm,
        qmp: Qmp::connect(&qmp),
    }
}

/// Waits until `side`'s console shows `marker`, or its QEMU exits.
fn wait_for_line(side: &mut Side, marker: &str, timeout: Duration) {
    let start = Instant::now();
    while !side.vm.console_text().contains(marker) {
        assert!(
            !side.vm.wait_exit(Duration::ZERO),
            "QEMU exited before the guest printed {marker}: {}",
            side.vm.stderr()
        );
        assert!(
            start.elapsed() < timeout,
            "the guest never printed {marker}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Migrates `source` to the QEMU listening on `uri` and follows it until it ends; returns
/// the last `query-migrate` answer.
fn migrate(source: &mut Qmp, destination: &mut Qmp, uri: &Path) -> Value {
    source.execute(
        "migrate-set-parameters",
        json!({ "max-bandwidth": 64 << 20, "downtime-limit": 300 }),
    );
    source.execute(
        "migrate",
        json!({ "uri": format!("unix:{}", uri.display()) }),
    );
    let start = Instant::now();
    let info = loop {
        let info = source.execute("query-migrate", json!({}));
        match info["status"].as_str().unwrap_or("") {
            "completed" | "failed" | "cancelled" => break info,
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "the migration did not end: {info}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    if info["status"] == "completed" {
        // The destination then loads the devices' state (the share's among them) and runs.
        let start = Instant::now();
        loop {
            let state = destination.execute("query-status", json!({}));
            match state["status"].as_str() {
                Some("running") => break,
                Some("inmigrate") | Some("postmigrate") => {}
                _ => panic!("the destination does not run the guest: {state}"),
            }
            assert!(start.elapsed() < Duration::from_secs(120), "{state}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    info
}

/// What the guest holds besides its file (`Held::Deleted`: also a file deleted while open,
/// which no path leads to; the destination is given `migration-on-error=guest-error`).
#[derive(Clone, Copy, PartialEq)]
enum Held {
    File,
    Deleted,
}

/// Migrates the guest once from one backend process to the other; returns the downtime (ms)
/// QEMU measured, the guest's output and the backends' logs.
fn run(backend: Backend, held: Held) -> (u64, String, String) {
    let dir = TestDir::new(&format!("fs-migrate-{backend:?}").to_lowercase());
    let shared = dir.join("shared");
    std::fs::create_dir(&shared).unwrap();
    let sockets: Vec<PathBuf> = (0..2).map(|i| dir.join(&format!("fs{i}.sock"))).collect();
    let deleted = held == Held::Deleted;
    let lenient = if deleted {
        ",migration-on-error=guest-error"
    } else {
        ""
    };
    let source_backend = serve(backend, &dir, &sockets[0], &shared, "source.log", "");
    let destination_backend = serve(
        backend,
        &dir,
        &sockets[1],
        &shared,
        "destination.log",
        lenient,
    );
    let initrd = dir.join("initrd");
    Vm::initramfs(
        &script(
            &GUEST
                .replace("AFTER", &AFTER.to_string())
                .replace("@DELETED@", if deleted { "1" } else { "0" }),
        ),
        &[],
        &initrd,
    );
    let consoles = [dir.join("console1.log"), dir.join("console2.log")];
    let dump = |title: &str| {
        for (n, console) in consoles.iter().enumerate() {
            let text = std::fs::read_to_string(console).unwrap_or_default();
            print_log(&format!("{title}: QEMU {} console", n + 1), &text);
        }
        print_log("source backend", &source_backend.log_text());
        print_log("destination backend", &destination_backend.log_text());
    };

    let mut source = qemu(&dir, 1, &initrd, &sockets[0], None);
    wait_for_line(&mut source, "WRITING", Duration::from_secs(300));
    let uri = dir.join("migrate.sock");
    let mut destination = qemu(&dir, 2, &initrd, &sockets[1], Some(&uri));
    let info = migrate(&mut source.qmp, &mut destination.qmp, &uri);
    if info["status"] != "completed" {
        dump("migration failed");
        panic!(
            "{backend:?}: {info}\nsource QEMU: {}\ndestination QEMU: {}",
            source.vm.stderr(),
            destination.vm.stderr()
        );
    }
    let downtime = info["downtime"].as_u64().unwrap_or(0);
    source.qmp.quit();
    assert!(
        source.vm.wait_exit(Duration::from_secs(30)),
        "source QEMU did not quit"
    );
    std::fs::write(shared.join("migrated"), b"").unwrap();
    let exited = destination.vm.wait_exit(Duration::from_secs(300));
    let texts = read_consoles(&consoles);
    let Some(guest) = result_of(&texts) else {
        dump("no result");
        panic!(
            "no result from the guest (QEMU exited: {exited}): {}",
            destination.vm.stderr()
        );
    };
    if guest.status != 0 {
        dump("guest failed");
    }
    guest.assert_success();

    // Every line the guest wrote, in order, once: none lost or doubled at the switch-over.
    let host = std::fs::read_to_string(shared.join("dir/held")).unwrap();
    let lines: Vec<&str> = host.lines().collect();
    let expected: Vec<String> = (1..=lines.len()).map(|n| format!("line {n}")).collect();
    assert!(
        lines == expected,
        "the host file is not lines 1..{}",
        lines.len()
    );
    let migrated_at: usize = tagged(&guest.output, "MIGRATED-AT")[0].parse().unwrap();
    assert_eq!(lines.len(), migrated_at + AFTER as usize);
    assert_eq!(tagged(&guest.output, "LINES"), [lines.len().to_string()]);
    let sum = Command::new("md5sum")
        .arg(shared.join("dir/held"))
        .output()
        .unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert_eq!(
        tagged(&guest.output, "GUEST-SUM"),
        [sum.split_whitespace().next().unwrap()]
    );
    eprintln!(
        "{backend:?}: {} lines, {migrated_at} before the guest saw it ran on the destination; \
         downtime {downtime} ms, total {} ms",
        lines.len(),
        info["total-time"]
    );
    let logs = format!(
        "{}\n{}",
        source_backend.log_text(),
        destination_backend.log_text()
    );
    match (backend, held) {
        (Backend::Vbmq, Held::File) => {
            source_backend.stop();
            destination_backend.stop();
        }
        // The lost file's warnings; virtiofsd ends with its frontend's connection. Whatever
        // they return is not checked.
        _ => {
            source_backend.terminate();
            destination_backend.terminate();
        }
    }
    (downtime, guest.output.clone(), logs)
}

#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_guest_with_a_file_open_migrates_between_two_vbmq_shares() {
    let (downtime, _, logs) = run(Backend::Vbmq, Held::File);
    assert_eq!(
        logs.matches("share: state transfer done").count(),
        2,
        "the state did not go through both processes:\n{logs}"
    );
    assert!(
        logs.contains("share: dirty page logging on"),
        "the source did not log dirty pages:\n{logs}"
    );
    eprintln!("DOWNTIME vbmq {downtime} ms");
}

/// The same migration with virtiofsd on both sides: the reference for the downtime, and a
/// check that the test's guest side holds for another backend.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn virtiofsd_migrates_the_same_guest() {
    let (downtime, _, _) = run(Backend::Virtiofsd, Held::File);
    eprintln!("DOWNTIME virtiofsd {downtime} ms");
}

/// A guest holding a file deleted while open (no path leads to it) migrates to a destination
/// with `migration-on-error=guest-error`: that file alone answers errors there, the rest works.
#[test]
#[cfg_attr(
    not(feature = "guest-tests"),
    ignore = "needs feature guest-tests: QEMU 10 and a guest kernel (scripts/test.sh)"
)]
fn a_deleted_file_held_open_is_lost_alone_with_guest_error() {
    let (_, output, logs) = run(Backend::Vbmq, Held::Deleted);
    assert_eq!(tagged(&output, "LOST-WRITE"), ["failed"], "{output}");
    assert!(logs.contains("cannot migrate"), "{logs}");
    assert!(logs.contains("the guest gets errors on it"), "{logs}");
}
