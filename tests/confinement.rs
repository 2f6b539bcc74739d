//! A process confined by `vbmq::confine` cannot reach files outside its disks and sockets, and a
//! forbidden system call ends it. Each scenario runs in a fresh child process (this test binary
//! re-executed), because confinement cannot be undone.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use vbmq::confine::{ConfineOptions, DiskAccess, FilesystemStatus, SECCOMP_EXIT_STATUS, confine};

const SCENARIO_ENV: &str = "VBMQ_CONFINE_SCENARIO";
const DIR_ENV: &str = "VBMQ_CONFINE_DIR";

struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-confine-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock")).unwrap();
        std::fs::write(dir.join("disk.img"), vec![0xa5u8; 4096]).unwrap();
        std::fs::write(dir.join("ro.img"), vec![0x5au8; 4096]).unwrap();
        std::fs::write(dir.join("secret"), b"not for vbmq").unwrap();
        std::fs::create_dir_all(dir.join("share/sub")).unwrap();
        std::fs::create_dir_all(dir.join("ro-share")).unwrap();
        std::fs::write(dir.join("ro-share/file"), b"shared").unwrap();
        Sandbox { dir }
    }

    fn run(&self, scenario: &str) -> Output {
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "confined_child", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(SCENARIO_ENV, scenario)
            .env(DIR_ENV, &self.dir)
            .output()
            .unwrap()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn options(dir: &Path, seccomp: bool) -> ConfineOptions {
    ConfineOptions {
        disks: vec![
            DiskAccess {
                path: dir.join("disk.img"),
                writable: true,
                held: None,
            },
            DiskAccess {
                path: dir.join("ro.img"),
                writable: false,
                held: None,
            },
        ],
        shares: vec![
            DiskAccess {
                path: dir.join("share"),
                writable: true,
                held: None,
            },
            DiskAccess {
                path: dir.join("ro-share"),
                writable: false,
                held: None,
            },
        ],
        sockets: vec![dir.join("sock/vbmq.sock")],
        run_time_socket_dirs: Vec::new(),
        read_dirs: Vec::new(),
        ceph: None,
        uring_register: false,
        nbd_client: false,
        seccomp,
    }
}

fn landlock_available() -> bool {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) only queries the
    // ABI version and touches no memory.
    let abi = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    abi >= 1
}

fn assert_child_ok(out: &Output) {
    assert!(
        out.status.success(),
        "child failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn filesystem_outside_disks_and_sockets_is_refused() {
    if !landlock_available() {
        eprintln!("skipping: this kernel has no Landlock");
        return;
    }
    let sandbox = Sandbox::new("fs");
    assert_child_ok(&sandbox.run("filesystem"));
    // The refused write really did not happen.
    assert_eq!(
        std::fs::read(sandbox.dir.join("ro.img")).unwrap(),
        vec![0x5au8; 4096]
    );
    assert!(!sandbox.dir.join("created-by-child").exists());
}

/// Runs the child `case` in a new sandbox `name`, checks that seccomp ended it with vbmq's exit
/// status, and returns its output and stderr.
fn ended_by_seccomp(name: &str, case: &str) -> (std::process::Output, String) {
    let sandbox = Sandbox::new(name);
    let out = sandbox.run(case);
    assert_eq!(out.status.code(), Some(SECCOMP_EXIT_STATUS), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

#[test]
fn starting_a_process_is_refused() {
    let sandbox = Sandbox::new("fork");
    let out = sandbox.run("forbidden-fork");
    // The C library blocks signals around its clone, so the kernel may deliver SIGSYS with the
    // default action instead of running the reporter: either way the child never ran.
    let by_signal = out.status.signal() == Some(libc::SIGSYS);
    assert!(
        by_signal || out.status.code() == Some(SECCOMP_EXIT_STATUS),
        "{out:?}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("spawn returned"));
}

#[test]
fn forbidden_syscall_ends_the_process_and_is_named() {
    let (out, stderr) = ended_by_seccomp("exec", "forbidden-exec");
    let expected = format!("vbmq: seccomp: forbidden system call {}", libc::SYS_execve);
    assert!(stderr.contains(&expected), "stderr: {stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("exec returned"));
}

#[test]
fn forbidden_syscall_from_a_thread_started_before_confinement_is_refused() {
    let (_, stderr) = ended_by_seccomp("thread", "forbidden-in-old-thread");
    assert!(
        stderr.contains(&format!("forbidden system call {}", libc::SYS_ptrace)),
        "{stderr}"
    );
}

#[test]
fn daemon_work_still_runs_under_seccomp() {
    let sandbox = Sandbox::new("allowed");
    assert_child_ok(&sandbox.run("allowed-under-seccomp"));
    assert_eq!(
        std::fs::read(sandbox.dir.join("disk.img")).unwrap()[..4],
        *b"vbmq"
    );
}

/// The confined side of every scenario; only meaningful when started by the tests above.
#[test]
#[ignore = "run by the other tests in a child process"]
fn confined_child() {
    let scenario = std::env::var(SCENARIO_ENV).expect("started by a parent test");
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    match scenario.as_str() {
        "filesystem" => filesystem(&dir),
        "forbidden-fork" => forbidden_fork(&dir),
        "forbidden-exec" => forbidden_exec(&dir),
        "forbidden-in-old-thread" => forbidden_in_old_thread(&dir),
        "allowed-under-seccomp" => allowed_under_seccomp(&dir),
        other => panic!("unknown scenario {other}"),
    }
}

fn filesystem(dir: &Path) {
    let mut disk_before = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("disk.img"))
        .unwrap();
    std::fs::write(dir.join("sock/stale.sock"), b"").unwrap();
    let status = confine(&options(dir, false)).unwrap();
    assert_ne!(status.filesystem, FilesystemStatus::Unsupported);

    // Allowed: the disks (read-only one read-only), and removing a file (the socket, at exit)
    // in the socket directory.
    disk_before.write_all(b"ok").unwrap();
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("disk.img"))
        .unwrap();
    let mut buf = Vec::new();
    File::open(dir.join("ro.img"))
        .unwrap()
        .read_to_end(&mut buf)
        .unwrap();
    std::fs::remove_file(dir.join("sock/stale.sock")).unwrap();
    // Refused: a new socket, even in the socket directory (listeners are bound before).
    let err = UnixListener::bind(dir.join("sock/vbmq.sock")).expect_err("no socket after start");
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");

    // Refused: everything else.
    let denied = |r: std::io::Result<File>| {
        let err = r.expect_err("access outside the sandbox must be refused");
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    };
    denied(File::open(dir.join("secret")));
    denied(File::open("/etc/passwd"));
    denied(OpenOptions::new().write(true).open(dir.join("ro.img")));
    denied(File::create(dir.join("created-by-child")));
    denied(File::create(dir.join("sock/not-a-socket")));
    assert!(std::fs::read_dir(dir).is_err());

    // A writable share: anything beneath it; a read-only one: reading only; neither reaches
    // beyond itself, whatever the path says.
    std::fs::write(dir.join("share/sub/new"), b"x").unwrap();
    std::fs::create_dir(dir.join("share/newdir")).unwrap();
    std::fs::rename(dir.join("share/sub/new"), dir.join("share/newdir/moved")).unwrap();
    std::fs::remove_file(dir.join("share/newdir/moved")).unwrap();
    assert_eq!(std::fs::read_dir(dir.join("share")).unwrap().count(), 2);
    assert_eq!(std::fs::read(dir.join("ro-share/file")).unwrap(), b"shared");
    denied(
        OpenOptions::new()
            .write(true)
            .open(dir.join("ro-share/file")),
    );
    denied(File::create(dir.join("ro-share/new")));
    denied(File::open(dir.join("share/../secret")));
}

fn forbidden_fork(dir: &Path) {
    confine(&options(dir, true)).unwrap();
    let result = Command::new("/bin/true").status();
    println!("spawn returned {result:?}");
}

fn forbidden_exec(dir: &Path) {
    confine(&options(dir, true)).unwrap();
    let path = c"/bin/true";
    let argv = [path.as_ptr(), std::ptr::null()];
    // SAFETY: argv is a NULL-terminated array of valid C strings that outlive the call.
    unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
    println!("exec returned");
}

fn forbidden_in_old_thread(dir: &Path) {
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let old = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        // SAFETY: PTRACE_TRACEME takes no pointers; the filter must stop it before the kernel.
        unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
    });
    confine(&options(dir, true)).unwrap();
    go_tx.send(()).unwrap();
    old.join().unwrap();
    println!("ptrace returned");
}

fn allowed_under_seccomp(dir: &Path) {
    let disk = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join("disk.img"))
        .unwrap();
    // Rings are created before confinement, as `serve` creates each queue's.
    let mut ring = io_uring::IoUring::new(8).unwrap();
    let status = confine(&options(dir, true)).unwrap();
    assert!(status.seccomp);
    // What a queue worker does: a thread, an eventfd, epoll, io_uring, positional I/O, sync.
    let worker = std::thread::spawn(move || {
        use std::os::unix::fs::FileExt;
        let efd = vmm_sys_util::eventfd::EventFd::new(libc::EFD_NONBLOCK).unwrap();
        efd.write(1).unwrap();
        let epoll = vmm_sys_util::epoll::Epoll::new().unwrap();
        epoll
            .ctl(
                vmm_sys_util::epoll::ControlOperation::Add,
                std::os::fd::AsRawFd::as_raw_fd(&efd),
                vmm_sys_util::epoll::EpollEvent::new(vmm_sys_util::epoll::EventSet::IN, 1),
            )
            .unwrap();
        let mut events = [vmm_sys_util::epoll::EpollEvent::default(); 1];
        assert_eq!(epoll.wait(0, &mut events).unwrap(), 1);
        let nop = io_uring::opcode::Nop::new().build().user_data(7);
        // SAFETY: a NOP references no memory.
        unsafe { ring.submission().push(&nop).unwrap() };
        ring.submit_and_wait(1).unwrap();
        assert_eq!(ring.completion().next().unwrap().user_data(), 7);
        disk.write_all_at(b"vbmq", 0).unwrap();
        disk.sync_data().unwrap();
    });
    worker.join().unwrap();
}

/// A running `vbmq serve` with one file disk, stopped on drop.
struct Served {
    child: std::process::Child,
    sandbox: Sandbox,
}

impl Served {
    fn start(name: &str, disk_opts: &str, args: &[&str]) -> Self {
        let sandbox = Sandbox::new(name);
        let socket = sandbox.dir.join("sock/vbmq.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_vbmq"))
            .arg("serve")
            .arg("--disk")
            .arg(format!(
                "socket={},path={}{disk_opts}",
                socket.display(),
                sandbox.dir.join("disk.img").display()
            ))
            .args(args)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !socket.exists() {
            assert!(std::time::Instant::now() < deadline, "vbmq did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The socket appears before confinement is applied: wait for the filter to be in place.
        std::thread::sleep(std::time::Duration::from_millis(300));
        Served { child, sandbox }
    }

    /// `Seccomp:` and `NoNewPrivs:` of every thread, from /proc.
    fn thread_status(&self) -> Vec<(String, String)> {
        let tasks = format!("/proc/{}/task", self.child.id());
        std::fs::read_dir(tasks)
            .unwrap()
            .map(|task| {
                let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
                let field = |name: &str| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix(name))
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                };
                (field("Seccomp:"), field("NoNewPrivs:"))
            })
            .collect()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn every_thread_of_the_daemon_runs_under_the_filter() {
    let served = Served::start("daemon", ",queues=2", &[]);
    // Confinement follows socket creation: give a loaded machine time to get there.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut threads = served.thread_status();
    while threads.iter().any(|(seccomp, _)| seccomp != "2") && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
        threads = served.thread_status();
    }
    assert!(threads.len() > 1, "{threads:?}");
    for (seccomp, no_new_privs) in &threads {
        assert_eq!(
            seccomp, "2",
            "a thread without the seccomp filter: {threads:?}"
        );
        assert_eq!(no_new_privs, "1", "{threads:?}");
    }
}

#[test]
fn seccomp_off_leaves_the_daemon_unfiltered() {
    let served = Served::start("daemon-off", "", &["--seccomp=off"]);
    assert!(
        served
            .thread_status()
            .iter()
            .all(|(seccomp, _)| seccomp == "0")
    );
}

#[test]
fn socket_is_private_unless_a_mode_is_given() {
    use std::os::unix::fs::PermissionsExt;
    let private = Served::start("mode-default", "", &[]);
    let socket = private.sandbox.dir.join("sock/vbmq.sock");
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let shared = Served::start("mode-shared", ",socket-mode=0660,socket-group=65534", &[]);
    let socket = shared.sandbox.dir.join("sock/vbmq.sock");
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o660
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&socket).unwrap().gid(),
        65534,
        "socket-group"
    );
}
