//! A throwaway single-node Ceph cluster for the tests and the benchmark's RBD study: one
//! `ceph-mon` and one `ceph-osd` on memstore, cephx, on a free loopback port, as children of
//! the caller; pool `rbd` of size 1. Dropping it kills exactly the processes it started and
//! removes its directory. (scripts/deps/ceph.sh installs the packages.) It panics, with the
//! daemons' logs, when the cluster cannot be made: the tests want that, and the benchmark
//! catches it.

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A running cluster.
pub struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    mon: Option<Child>,
    osd: Option<Child>,
    osd_id: String,
}

/// A loopback port with nothing listening on it and on the next one (v2 and v1 monitor ports).
fn free_port_pair() -> u16 {
    for _ in 0..100 {
        let Ok(listener) = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)) else {
            continue;
        };
        let port = listener.local_addr().expect("local addr").port();
        if port < 60000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 1)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port pair");
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("spawn a Ceph tool");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn uuid() -> String {
    let out = run(&mut Command::new("uuidgen"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn conf_text(dir: &Path, fsid: &str, port: u16) -> String {
    let d = dir.display();
    let v1 = port + 1;
    let (min, max) = (port + 2, port + 60);
    format!(
        "[global]
fsid = {fsid}
mon host = [v2:127.0.0.1:{port},v1:127.0.0.1:{v1}]
public addr = 127.0.0.1
ms bind ipv6 = false
ms bind port min = {min}
ms bind port max = {max}
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
keyring = {d}/keyring
run dir = {d}/run
log file = {d}/log/$name.log
mon cluster log file = {d}/log/cluster.log
pid file = {d}/run/$name.pid
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail warn = 1
mon data avail crit = 0
paxos propose interval = 0.05
paxos min wait = 0.01
rbd default features = layering,exclusive-lock,object-map,fast-diff,deep-flatten

[mon]
mon data = {d}/mon.$id
keyring = {d}/mon.$id/keyring
admin socket = {d}/run/$name.asok

[osd]
osd data = {d}/osd.$id
keyring = {d}/osd.$id/keyring
admin socket = {d}/run/$name.asok
osd objectstore = memstore
memstore device bytes = 1073741824
memstore page set = true
memstore page size = 4096
"
    )
}

impl Cluster {
    /// Starts a cluster and creates pool `rbd`. Panics, with the daemons' logs, if it fails.
    pub fn start() -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("vbmq-ceph.")
            .tempdir()
            .expect("temp dir");
        let d = &dir.path().to_path_buf();
        for sub in ["log", "run", "mon.a", "osd.0"] {
            std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        }
        let fsid = uuid();
        let port = free_port_pair();
        let conf = d.join("ceph.conf");
        std::fs::write(&conf, conf_text(d, &fsid, port)).expect("write ceph.conf");
        let keyring = d.join("keyring");
        run(Command::new("ceph-authtool")
            .arg("--create-keyring")
            .arg(&keyring)
            .args(["--gen-key", "-n", "mon.", "--cap", "mon", "allow *"]));
        run(Command::new("ceph-authtool").arg(&keyring).args([
            "--gen-key",
            "-n",
            "client.admin",
            "--cap",
            "mon",
            "allow *",
            "--cap",
            "osd",
            "allow *",
            "--cap",
            "mgr",
            "allow *",
        ]));
        let monmap = d.join("monmap");
        run(Command::new("monmaptool")
            .args(["--create", "--fsid", &fsid, "--enable-all-features"])
            .args(["--set-min-mon-release", "pacific", "--addv", "a"])
            .arg(format!("[v2:127.0.0.1:{port},v1:127.0.0.1:{}]", port + 1))
            .arg(&monmap));
        run(Command::new("ceph-mon")
            .arg("-c")
            .arg(&conf)
            .args(["-i", "a", "--mkfs", "--monmap"])
            .arg(&monmap)
            .arg("--keyring")
            .arg(&keyring));
        let mut cluster = Cluster {
            conf,
            mon: None,
            osd: None,
            osd_id: String::new(),
            dir,
        };
        cluster.mon = Some(cluster.daemon("ceph-mon", &["-i", "a"]));
        cluster.ceph(&["mon", "stat"]);
        let osd_uuid = uuid();
        let id = cluster.ceph(&["osd", "new", &osd_uuid]).trim().to_string();
        let osd_dir = d.join(format!("osd.{id}"));
        std::fs::create_dir_all(&osd_dir).expect("mkdir osd");
        run(Command::new("ceph-osd")
            .arg("-c")
            .arg(&cluster.conf)
            .args(["-i", &id, "--mkfs", "--mkkey", "--osd-uuid", &osd_uuid])
            .arg("--no-mon-config"));
        let osd_keyring = osd_dir.join("keyring");
        let osd_name = format!("osd.{id}");
        cluster.ceph_with(
            &[
                "auth",
                "add",
                &osd_name,
                "osd",
                "allow *",
                "mon",
                "allow profile osd",
                "mgr",
                "allow profile osd",
                "-i",
            ],
            &[&osd_keyring],
        );
        cluster.osd = Some(cluster.daemon("ceph-osd", &["-i", &id]));
        cluster.osd_id = id;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !cluster
            .ceph(&["osd", "stat", "-f", "json"])
            .contains("\"num_up_osds\":1")
        {
            assert!(
                Instant::now() < deadline,
                "the OSD never came up: {}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster.ceph(&["osd", "pool", "create", "rbd", "8", "8", "replicated"]);
        cluster.ceph(&[
            "osd",
            "pool",
            "set",
            "rbd",
            "size",
            "1",
            "--yes-i-really-mean-it",
        ]);
        cluster.rbd(&["pool", "init", "rbd"]);
        cluster
    }

    fn daemon(&self, program: &str, args: &[&str]) -> Child {
        let out = std::fs::File::create(self.dir.path().join(format!("log/{program}.out")))
            .expect("daemon log");
        let err = out.try_clone().expect("dup log");
        Command::new(program)
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .arg("-f")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e} (scripts/deps/ceph.sh installs it)"))
    }

    /// The configuration file clients use (its keyring holds client.admin).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// `ceph ARGS`; returns stdout.
    pub fn ceph(&self, args: &[&str]) -> String {
        self.ceph_with(args, &[])
    }

    fn ceph_with(&self, args: &[&str], paths: &[&Path]) -> String {
        let out = run(Command::new("timeout")
            .arg("60")
            .arg("ceph")
            .arg("-c")
            .arg(&self.conf)
            .args(["--connect-timeout", "30"])
            .args(args)
            .args(paths));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `rbd ARGS`; returns stdout.
    pub fn rbd(&self, args: &[&str]) -> String {
        let out = run(Command::new("timeout")
            .arg("60")
            .arg("rbd")
            .arg("-c")
            .arg(&self.conf)
            .args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates image `rbd/NAME` of `size` bytes.
    pub fn create_image(&self, name: &str, size: u64) {
        self.rbd(&[
            "create",
            "--size",
            &format!("{}K", size / 1024),
            &format!("rbd/{name}"),
        ]);
    }

    /// `rbd=` value for an image of pool rbd, with its ceph-conf.
    pub fn disk(&self, name: &str) -> String {
        format!("rbd=rbd/{name},ceph-conf={}", self.conf.display())
    }

    /// The OSD's process id.
    pub fn osd_pid(&self) -> i32 {
        self.osd.as_ref().map_or(0, |c| c.id().cast_signed())
    }

    /// Sends `signal` to the OSD.
    pub fn signal_osd(&self, signal: i32) {
        // SAFETY: a signal to a child this cluster started.
        unsafe { libc::kill(self.osd_pid(), signal) };
    }

    /// Kills the OSD and reaps it.
    pub fn kill_osd(&mut self) {
        if let Some(mut osd) = self.osd.take() {
            let _ = osd.kill();
            let _ = osd.wait();
        }
    }

    /// The last lines of every daemon log, for a failure message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        if let Ok(entries) = std::fs::read_dir(self.dir.path().join("log")) {
            for entry in entries.flatten() {
                let body = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let lines: Vec<&str> = body.lines().collect();
                let tail = lines[lines.len().saturating_sub(15)..].join("\n");
                text.push_str(&format!("\n== {}\n{tail}", entry.path().display()));
            }
        }
        text
    }
}

/// The cluster shared by the tests of one test binary, started on first use and torn down when
/// the binary exits.
static SHARED: OnceLock<Mutex<Option<Cluster>>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(shared) = SHARED.get() {
        drop(shared.lock().unwrap_or_else(|p| p.into_inner()).take());
    }
}

/// Runs `f` with the binary's shared cluster.
pub fn with_shared<T>(f: impl FnOnce(&Cluster) -> T) -> T {
    let shared = SHARED.get_or_init(|| {
        let cluster = Cluster::start();
        // SAFETY: registers a plain function, run by exit() after the tests.
        unsafe { libc::atexit(stop_shared) };
        Mutex::new(Some(cluster))
    });
    let guard = shared.lock().unwrap_or_else(|p| p.into_inner());
    f(guard.as_ref().expect("the shared cluster is running"))
}

/// A name no other image of this process has.
pub fn unique_image_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A throwaway cluster has nothing to save: SIGKILL, newest first (a memstore OSD takes
        // seconds to stop on SIGTERM). A stopped OSD is continued first, or it would linger.
        for child in [self.osd.take(), self.mon.take()].into_iter().flatten() {
            let mut child = child;
            // SAFETY: signals to children this cluster started and has not reaped.
            unsafe { libc::kill(child.id().cast_signed(), libc::SIGCONT) };
            let _ = child.kill();
            let _ = child.wait();
        }
        // `dir` (a TempDir) is removed after this.
    }
}
