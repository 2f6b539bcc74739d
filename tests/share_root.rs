//! A share's root is the directory it was added with, for the share's whole life: whatever is
//! renamed or linked on its path afterwards (by a tenant, or by the guest of a share that
//! contains it), FUSE INIT, DESTROY, a frontend's reconnect and a migration load serve that
//! directory and nothing else; a share added under a read-only view of the file system (the
//! shipped unit's `ProtectSystem=strict`) stays writable; the share's migration state names no
//! host path. `vbmq serve --fs-root` with shares added by `vbmq ctl add-fs`, driven through
//! their sockets by the user-space virtio-fs client.

mod common;
#[path = "common/no_landlock.rs"]
mod no_landlock;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::fs::names;
use common::{Daemon, ctl, wait_for};
use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, CreateIn, EntryOut, MkdirIn, Opcode, ROOT_ID, ReadIn, RenameIn};
use vm_memory::ByteValued;

const OWN: &[u8] = b"the passed directory's own file\n";

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `vbmq serve --control DIR/run/ctl.sock --fs-root DIR/roots` and `extra`, started by
/// `launcher` (the program and its first arguments, before `vbmq`), its log in `DIR/vbmq.log`.
fn serve(dir: &Path, launcher: &[&str], extra: &[String]) -> (Daemon, PathBuf) {
    serve_on(dir, launcher, extra, Kernel::WithLandlock)
}

/// Whether the kernel vbmq runs on has Landlock (a run-time share's mount is served only
/// where it has not: Landlock's rules, made at start, do not reach it).
#[derive(Clone, Copy, PartialEq)]
enum Kernel {
    WithLandlock,
    WithoutLandlock,
}

/// As [`serve`], on `kernel`.
fn serve_on(dir: &Path, launcher: &[&str], extra: &[String], kernel: Kernel) -> (Daemon, PathBuf) {
    let control = dir.join("run/ctl.sock");
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::create_dir_all(dir.join("roots")).unwrap();
    let vbmq = env!("CARGO_BIN_EXE_vbmq");
    let mut command = match launcher.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(vbmq);
            command
        }
        None => Command::new(vbmq),
    };
    if kernel == Kernel::WithoutLandlock {
        use std::os::unix::process::CommandExt;
        // SAFETY: the hook installs a seccomp filter and touches nothing else of the parent.
        unsafe { command.pre_exec(no_landlock::no_landlock) };
    }
    let child = command
        .args(["serve", "--control", s(&control), "--fs-root"])
        .arg(dir.join("roots"))
        .args(extra)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("vbmq.log")).unwrap())
        .spawn()
        .expect("spawn vbmq");
    let daemon = Daemon { child };
    wait_for(&control);
    (daemon, control)
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("vbmq.log")).unwrap_or_default()
}

/// `vbmq ctl add-fs` of `shared` on `socket`.
fn add_fs(control: &Path, socket: &Path, shared: &Path) {
    let spec = format!("socket={},dir={},tag=t,mode=event", s(socket), s(shared));
    let out = ctl(control, &["add-fs", &spec]);
    assert!(out.status.success(), "add-fs {spec}: {out:?}");
}

/// Checks that the share on `socket` was added served from `wall` (the log's words): the mount
/// `vbmq ctl` (root here) made of it where the kernel has no Landlock, its directory where it has.
fn assert_served_from(dir: &Path, socket: &Path, wall: &str) {
    let added = format!("{}: share added: ", s(socket));
    let line = log(dir)
        .lines()
        .find(|line| line.contains(&added))
        .map(str::to_string);
    assert!(
        line.as_deref().is_some_and(|l| l.contains(wall)),
        "not served from {wall}: {line:?}"
    );
}

const MOUNT: &str = "served from a mount of its own";
const DIRECTORY: &str = "served from its directory";

/// The whole of the file at node `node`, read through the share.
fn read_node(client: &mut FsClient, node: u64) -> std::io::Result<Vec<u8>> {
    let fh = client.open(node, libc::O_RDONLY as u32)?;
    let read = ReadIn {
        fh,
        size: 64 << 10,
        ..ReadIn::default()
    };
    let (out, body) = client.call(Opcode::Read, node, fuse::args(&read), &[], 16 + (64 << 10))?;
    client.release(node, fh)?;
    match out.error {
        0 => Ok(body),
        e => Err(std::io::Error::from_raw_os_error(-e)),
    }
}

/// The file `name` of the share's root, read through the share.
fn read(client: &mut FsClient, name: &str) -> std::io::Result<Vec<u8>> {
    let node = client.lookup(ROOT_ID, name)?.nodeid;
    read_node(client, node)
}

/// Creates the empty file `name` in the share's root, through the share.
fn create(client: &mut FsClient, name: &str) -> std::io::Result<()> {
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode: libc::S_IFREG | 0o644,
        ..CreateIn::default()
    };
    let (out, body) = client.call(
        Opcode::Create,
        ROOT_ID,
        fuse::args(&create),
        &[name.as_bytes()],
        4096,
    )?;
    if out.error != 0 {
        return Err(std::io::Error::from_raw_os_error(-out.error));
    }
    let entry = EntryOut::from_slice(&body[..size_of::<EntryOut>()]).expect("an entry");
    let open = fuse::OpenOut::from_slice(&body[size_of::<EntryOut>()..][..16]).expect("open");
    client.release(entry.nodeid, open.fh)
}

/// DESTROY, then INIT again on the same connection (a guest unmounting and mounting again).
fn destroy_and_init(client: &mut FsClient) {
    let (out, _) = client
        .call(Opcode::Destroy, ROOT_ID, &[], &[], 4096)
        .expect("destroy");
    assert_eq!(out.error, 0, "DESTROY");
    client.init().expect("INIT after DESTROY");
}

/// Checks that `client` serves `served` (the passed directory, wherever it is now) at `step`:
/// its file reads, and a file created lands there and nowhere in `decoy`.
fn serves(client: &mut FsClient, served: &Path, decoy: &Path, step: &str, dir: &Path) {
    let decoy_before = names(decoy);
    let read = read(client, "own")
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .map_err(|e| format!("{e}: {}", log(dir)));
    assert_eq!(
        read.as_deref(),
        Ok(String::from_utf8_lossy(OWN).as_ref()),
        "{step}: the passed directory's file"
    );
    let name = format!("created-{}", step.replace(' ', "-"));
    create(client, &name).unwrap_or_else(|e| panic!("{step}: create: {e}: {}", log(dir)));
    assert!(served.join(&name).exists(), "{step}: created elsewhere");
    assert_eq!(names(decoy), decoy_before, "{step}: the decoy changed");
}

/// INIT, DESTROY+INIT, a reconnect and a migration load (the state of a guest holding `own`)
/// each serve `served`, never `decoy`, which `socket`'s path leads to now.
fn every_session_serves(socket: &Path, served: &Path, decoy: &Path, dir: &Path) {
    let mut client = FsClient::connect(socket).expect("connect");
    serves(&mut client, served, decoy, "INIT", dir);
    destroy_and_init(&mut client);
    serves(&mut client, served, decoy, "DESTROY and INIT", dir);
    drop(client);
    // The next frontend is served once the share has let the previous one go.
    let mut client = FsClient::connect(socket).expect("reconnect");
    serves(&mut client, served, decoy, "reconnect", dir);
    let own = client.lookup(ROOT_ID, "own").expect("lookup own").nodeid;
    let state = client.save_state().expect("save");
    drop(client);
    let mut loaded = FsClient::connect_without_init(socket).expect("connect the destination");
    loaded
        .load_state(&state)
        .unwrap_or_else(|e| panic!("load: {e}: {}", log(dir)));
    let held = read_node(&mut loaded, own).map_err(|e| e.to_string());
    assert_eq!(held.as_deref(), Ok(OWN), "the held file after a load");
    serves(&mut loaded, served, decoy, "migration load", dir);
}

/// A directory standing in for what a renamed path is made to lead to: `vm/own` in it holds
/// other bytes.
fn decoy(path: &Path) -> PathBuf {
    std::fs::create_dir_all(path.join("vm")).unwrap();
    std::fs::write(path.join("vm/own"), b"another tenant's file\n").unwrap();
    path.join("vm")
}

/// A run-time share whose path is renamed and replaced by a symbolic link, to a directory
/// inside the `--fs-root` (another tenant's) and to one outside it, either the share's own
/// directory or a directory above it: every session still serves the directory passed.
#[test]
fn a_run_time_share_serves_its_passed_directory_whatever_its_path_leads_to_later() {
    renamed_and_linked_cases(Kernel::WithLandlock, DIRECTORY);
}

/// As above, served from the mount `vbmq ctl add-fs` made of the directory (a kernel without
/// Landlock, where that mount is the only kernel wall).
#[test]
fn a_run_time_share_served_from_its_mount_serves_its_passed_directory_whatever_its_path_leads_to_later()
 {
    renamed_and_linked_cases(Kernel::WithoutLandlock, MOUNT);
}

fn renamed_and_linked_cases(kernel: Kernel, wall: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (mut daemon, control) = serve_on(dir, &[], &[], kernel);
    let decoys = [
        ("inside", decoy(&dir.join("roots/other"))),
        ("outside", decoy(&dir.join("outside"))),
    ];
    for (where_to, decoy_vm) in &decoys {
        for renamed in ["a directory above it", "its directory"] {
            let case = format!("{where_to}, {renamed}");
            let tenant = dir.join(format!("roots/tenant-{where_to}-{}", renamed.len()));
            let shared = tenant.join("vm");
            std::fs::create_dir_all(&shared).unwrap();
            std::fs::write(shared.join("own"), OWN).unwrap();
            let socket = dir.join(format!("run/{where_to}-{}.sock", renamed.len()));
            add_fs(&control, &socket, &shared);
            assert_served_from(dir, &socket, wall);

            let moved = if renamed == "its directory" {
                let moved = tenant.join("vm.moved");
                std::fs::rename(&shared, &moved).unwrap();
                std::os::unix::fs::symlink(decoy_vm, &shared).unwrap();
                moved
            } else {
                let moved_tenant = tenant.with_extension("moved");
                std::fs::rename(&tenant, &moved_tenant).unwrap();
                std::os::unix::fs::symlink(decoy_vm.parent().unwrap(), &tenant).unwrap();
                moved_tenant.join("vm")
            };
            assert_eq!(
                std::fs::read(shared.join("own")).unwrap(),
                b"another tenant's file\n"
            );
            eprintln!("case: {case}");
            every_session_serves(&socket, &moved, decoy_vm, dir);
        }
    }
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}

/// MKDIR of `name` in the share's root, through the share.
fn mkdir(client: &mut FsClient, name: &str) {
    let args = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    let (out, _) = client
        .call(
            Opcode::Mkdir,
            ROOT_ID,
            fuse::args(&args),
            &[name.as_bytes()],
            4096,
        )
        .expect("mkdir");
    assert_eq!(out.error, 0, "MKDIR {name}");
}

/// RENAME of `from` to `to`, both in the share's root, through the share.
fn rename(client: &mut FsClient, from: &str, to: &str) {
    let args = RenameIn { newdir: ROOT_ID };
    let (out, _) = client
        .call(
            Opcode::Rename,
            ROOT_ID,
            fuse::args(&args),
            &[from.as_bytes(), to.as_bytes()],
            4096,
        )
        .expect("rename");
    assert_eq!(out.error, 0, "RENAME {from} {to}");
}

/// A guest whose share contains another share's directory renames that directory and puts one
/// of its own in its place, then the inner share's guest unmounts and mounts again (DESTROY and
/// INIT), reconnects and is migrated: the inner share still serves the directory it was added
/// with.
#[test]
fn a_nested_share_cannot_be_taken_over_by_the_outer_guest() {
    nested_case(Kernel::WithLandlock, DIRECTORY);
}

/// As above, both shares served from the mounts `vbmq ctl add-fs` made (no Landlock).
#[test]
fn a_nested_share_served_from_its_mount_cannot_be_taken_over_by_the_outer_guest() {
    nested_case(Kernel::WithoutLandlock, MOUNT);
}

fn nested_case(kernel: Kernel, wall: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (mut daemon, control) = serve_on(dir, &[], &[], kernel);
    let outer = dir.join("roots/outer");
    let inner = outer.join("inner");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(inner.join("own"), OWN).unwrap();
    let (outer_socket, inner_socket) = (dir.join("run/outer.sock"), dir.join("run/inner.sock"));
    add_fs(&control, &outer_socket, &outer);
    add_fs(&control, &inner_socket, &inner);
    assert_served_from(dir, &inner_socket, wall);
    let mut inner_guest = FsClient::connect(&inner_socket).expect("connect inner");
    assert_eq!(read(&mut inner_guest, "own").unwrap(), OWN);

    let mut outer_guest = FsClient::connect(&outer_socket).expect("connect outer");
    rename(&mut outer_guest, "inner", "inner.taken");
    mkdir(&mut outer_guest, "inner");
    let planted = outer.join("inner");
    std::fs::write(planted.join("own"), b"the outer guest's file\n").unwrap();

    // The inner guest's session goes on; then every new one.
    serves(
        &mut inner_guest,
        &outer.join("inner.taken"),
        &planted,
        "held",
        dir,
    );
    drop(inner_guest);
    every_session_serves(&inner_socket, &outer.join("inner.taken"), &planted, dir);
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}

/// A share given at start (`--fs`) whose directory above is renamed and replaced by a link:
/// every session still serves the directory opened at start.
#[test]
fn a_start_time_share_serves_the_directory_opened_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let tenant = dir.join("tenant");
    std::fs::create_dir_all(tenant.join("vm")).unwrap();
    std::fs::write(tenant.join("vm/own"), OWN).unwrap();
    let socket = dir.join("run/fs.sock");
    let spec = format!(
        "socket={},dir={},tag=t,mode=event",
        s(&socket),
        s(&tenant.join("vm"))
    );
    let (mut daemon, _control) = serve(dir, &[], &["--fs".into(), spec]);
    wait_for(&socket);
    let decoy_vm = decoy(&dir.join("outside"));
    std::fs::rename(&tenant, dir.join("tenant.moved")).unwrap();
    std::os::unix::fs::symlink(dir.join("outside"), &tenant).unwrap();
    every_session_serves(&socket, &dir.join("tenant.moved/vm"), &decoy_vm, dir);
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}

/// A share added at run time to a vbmq that sees its `--fs-root` read-only, as the shipped
/// `contrib/vbmq.service` runs it (`ProtectSystem=strict`: a read-only view of every path but
/// `ReadWritePaths`); `vbmq ctl`, outside that view, passes a writable directory. systemd is not
/// the init here, so the view is made as systemd makes it: a mount namespace of its own, the
/// directory bind-mounted over itself read-only. Every session can write.
#[test]
#[cfg_attr(
    not(feature = "root-tests"),
    ignore = "needs feature root-tests: root for a mount namespace (scripts/test.sh)"
)]
fn a_run_time_share_stays_writable_under_the_units_read_only_view() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let roots = dir.join("roots");
    std::fs::create_dir_all(&roots).unwrap();
    // A private mount namespace: nothing of it reaches the host's, and it ends with vbmq.
    let view = format!(
        "mount --bind {r} {r} && mount -o remount,bind,ro {r} && exec \"$0\" \"$@\"",
        r = s(&roots)
    );
    let launcher = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &view,
    ];
    let (mut daemon, control) = serve(dir, &launcher, &[]);
    let mounts = std::fs::read_to_string(format!("/proc/{}/mountinfo", daemon.child.id()))
        .expect("vbmq's mount table");
    assert!(
        mounts
            .lines()
            .any(|l| l.split(' ').nth(4) == Some(s(&roots)) && l.contains(" ro,")),
        "the --fs-root is not read-only in vbmq's view: {mounts}"
    );
    let shared = roots.join("vm");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("own"), OWN).unwrap();
    let socket = dir.join("run/vm.sock");
    add_fs(&control, &socket, &shared);
    let nothing = dir.join("nothing");
    std::fs::create_dir(&nothing).unwrap();
    every_session_serves(&socket, &shared, &nothing, dir);
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}

/// The share's state sent to the frontend names held inodes by their paths inside the share
/// alone: one the host moved out of it is sent as lost, with no host path in the reason.
#[test]
fn a_share_state_names_no_host_path() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (mut daemon, control) = serve(dir, &[], &[]);
    let shared = dir.join("roots/vm");
    std::fs::create_dir_all(shared.join("sub")).unwrap();
    std::fs::write(shared.join("sub/held"), OWN).unwrap();
    let socket = dir.join("run/vm.sock");
    add_fs(&control, &socket, &shared);
    let mut client = FsClient::connect(&socket).expect("connect");
    let sub = client.lookup(ROOT_ID, "sub").expect("lookup sub").nodeid;
    client.lookup(sub, "held").expect("lookup held");
    std::fs::create_dir(dir.join("private")).unwrap();
    std::fs::rename(shared.join("sub/held"), dir.join("private/host-only-name")).unwrap();
    let state = client.save_state().expect("save");
    let state = String::from_utf8_lossy(&state);
    assert!(
        state.contains("\"lost\""),
        "the moved file is not lost: {state}"
    );
    for host in [s(dir), "private", "host-only-name"] {
        assert!(!state.contains(host), "the state names {host}: {state}");
    }
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}

/// A detached mount of `dir` (`open_tree(OPEN_TREE_CLONE)`), as `vbmq ctl add-fs` makes one.
fn detached_mount(dir: &Path) -> std::fs::File {
    use std::os::fd::FromRawFd;
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let path = std::ffi::CString::new(s(dir)).unwrap();
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    // SAFETY: open_tree reads the NUL-terminated path and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    assert!(fd >= 0, "open_tree: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor nothing else owns.
    unsafe { std::fs::File::from_raw_fd(i32::try_from(fd).unwrap()) }
}

/// A client other than `vbmq ctl` passes, beside a directory beneath the `--fs-root`, a
/// "mount" that is a detached mount of another directory, or the directory itself (no mount):
/// each is refused with one line, and nothing is served; the mount of the directory itself is
/// served from (on a kernel without Landlock), `..` at its root staying there.
#[test]
fn a_passed_mount_is_served_only_if_it_is_a_detached_mount_of_the_directory() {
    use std::os::fd::AsRawFd;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let (mut daemon, control) = serve_on(dir, &[], &[], Kernel::WithoutLandlock);
    let shared = dir.join("roots/vm");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("own"), OWN).unwrap();
    let other = decoy(&dir.join("roots/other"));
    let socket = dir.join("run/raw.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    let lock = tempfile::tempfile().unwrap();
    let directory = std::fs::File::open(&shared).unwrap();
    let spec = format!("socket={},dir={},tag=t,mode=event", s(&socket), s(&shared));
    let add = |mount: &std::fs::File| {
        let body = serde_json::json!({"command": "add-fs", "spec": spec, "mount": true});
        let fds = [
            directory.as_raw_fd(),
            mount.as_raw_fd(),
            listener.as_raw_fd(),
            lock.as_raw_fd(),
        ];
        common::control_request(&control, &body, &fds)
    };
    let refused = |reply: serde_json::Value| {
        assert_eq!(reply["ok"], false, "{reply}");
        reply["error"].as_str().expect("an error").to_string()
    };
    assert_eq!(
        refused(add(&detached_mount(&other))),
        "--fs dir: the mount passed is not a mount of the directory passed (another root)"
    );
    assert_eq!(
        refused(add(&std::fs::File::open(&shared).unwrap())),
        "--fs dir: the mount passed is not a detached mount (its `..` leads out of it)"
    );
    let listed = common::ctl(&control, &["list"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed, serde_json::json!([]), "a refused share is served");

    let reply = add(&detached_mount(&shared));
    assert_eq!(reply["ok"], true, "{reply}");
    assert_served_from(dir, &socket, MOUNT);
    let mut client = FsClient::connect(&socket).expect("connect");
    let dotdot = client.lookup(ROOT_ID, "..").expect("lookup ..");
    let root = client.getattr(ROOT_ID).expect("getattr root");
    assert_eq!(dotdot.attr.ino, root.attr.ino, "`..` at the root left it");
    assert_eq!(read(&mut client, "own").unwrap(), OWN);
    drop(client);
    assert!(daemon.alive(), "{}", log(dir));
    assert!(daemon.terminate().success());
}
