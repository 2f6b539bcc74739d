//! Starting the systems: bare metal needs nothing, the others are vhost-user-blk backend
//! processes pinned to the backend CPUs (see `running` for what a started one is).

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cpus::{cpu_list, pin_to};
use super::error::{BenchError, Result};
use super::running::Running;
use super::systems::{DiskSetup, System, Target};
use super::workloads::SPREAD_STRIDE;

/// Starts the systems with a fixed disk, CPU set and scratch directory.
#[derive(Debug)]
pub struct Launcher {
    /// The vbmq executable (this one).
    pub vbmq: PathBuf,
    /// qemu-storage-daemon, if installed.
    pub qsd: Option<PathBuf>,
    /// The backing file.
    pub disk: PathBuf,
    /// Its size, also the size of the null devices.
    pub disk_size: u64,
    /// Where sockets and backend logs go.
    pub run_dir: PathBuf,
    /// CPUs the backend processes are confined to.
    pub backend_cpus: Vec<usize>,
}

impl Launcher {
    /// Starts `system` with `queues` queues and waits until it accepts a frontend. `seq` makes
    /// socket and log names unique.
    pub fn launch(&self, system: System, queues: usize, seq: usize) -> Result<Running> {
        if let System::BareMetalPsync | System::BareMetalPageCachePsync = system {
            return Ok(Running {
                child: None,
                target: Target::FileSync {
                    path: self.disk.clone(),
                    direct: system == System::BareMetalPsync,
                },
                socket: None,
                log: None,
                control: None,
            });
        }
        if let System::BareMetal | System::BareMetalPageCache = system {
            return Ok(Running {
                child: None,
                target: Target::File {
                    path: self.disk.clone(),
                    direct: system == System::BareMetal,
                },
                socket: None,
                log: None,
                control: None,
            });
        }
        if let System::Vbmq { storage, .. } = system {
            self.prepare(storage)?;
        }
        let socket = self.run_dir.join(format!("{}-{seq}.sock", system.id()));
        let log = self.run_dir.join(format!("{}-{seq}.log", system.id()));
        let control =
            needs_control(system).then(|| self.run_dir.join(format!("{}-{seq}.ctl", system.id())));
        let mut cmd = self.command(system, queues, &socket)?;
        if let Some(control) = &control {
            cmd.arg("--control").arg(control);
        }
        let log_file = File::create(&log)
            .map_err(|e| BenchError::io(format!("creating {}", log.display()), e))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file));
        let cpus = self.backend_cpus.clone();
        // SAFETY: the closure only makes two system calls (setsid, and sched_setaffinity on a
        // stack-built set in pin_to), both async-signal-safe, so it may run between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                // Own session, as a VM's backend is. The terminal's Ctrl-C reaches the harness
                // only, which stops its backends itself after the current run; and with
                // scheduler autogroups the backend gets its own CPU share instead of splitting
                // the harness' share with the client threads on the other CPU.
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                pin_to(&cpus)
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| BenchError::io(format!("starting {}", system.id()), e))?;
        let mut running = Running {
            child: Some(child),
            target: Target::VhostUser(socket.clone()),
            socket: Some(socket.clone()),
            log: Some(log),
            control: control.clone(),
        };
        running.wait_ready(system)?;
        if let (
            Some(control),
            System::Vbmq {
                storage: DiskSetup::Tracked,
                ..
            },
        ) = (&control, system)
        {
            self.checkpoint(control, &socket)?;
        }
        if let System::Vbmq {
            storage: DiskSetup::Thin { copied: true },
            ..
        } = system
        {
            self.wait_filled()?;
        }
        Ok(running)
    }

    /// The key file of [`DiskSetup::Encrypted`] (a fixed key: the benchmark hides nothing).
    fn key_file(&self) -> PathBuf {
        self.run_dir.join("bench.key")
    }

    /// DISK of a [`DiskSetup::Thin`] disk: beside the backing file, on the same storage.
    pub fn thin_disk(&self, copied: bool) -> PathBuf {
        let mut name = self.disk.as_os_str().to_owned();
        name.push(if copied { ".thin-copied" } else { ".thin" });
        PathBuf::from(name)
    }

    /// Removes the thin disks and their maps, the changed-block maps and the snapshot (at the
    /// end, or to start a fresh one).
    pub fn remove_thin_disks(&self) {
        for copied in [false, true] {
            let disk = self.thin_disk(copied);
            let _ = fs::remove_file(thin_map(&disk));
            let _ = fs::remove_file(disk);
        }
        let _ = fs::remove_file(self.beside_disk(".changes"));
        let _ = fs::remove_file(self.snapshot_file());
    }

    /// `self.disk` with `suffix` appended: a file beside it, on the same storage.
    fn beside_disk(&self, suffix: &str) -> PathBuf {
        let mut name = self.disk.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    /// The file [`DiskSetup::Snapshotting`] snapshots the disk into: beside it.
    pub fn snapshot_file(&self) -> PathBuf {
        self.beside_disk(".snapshot")
    }

    /// Begins the changed-block map of [`DiskSetup::Tracked`] (`vbmq ctl checkpoint`),
    /// retrying while the control server is not yet reachable (exit status 1).
    fn checkpoint(&self, control: &Path, socket: &Path) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = Command::new(&self.vbmq)
                .args(ctl_checkpoint(control, socket))
                .stdin(Stdio::null())
                .output()
                .map_err(|e| BenchError::io("running vbmq ctl checkpoint", e))?;
            match out.status.code() {
                Some(0) => return Ok(()),
                Some(1) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    return Err(BenchError::Backend(format!(
                        "vbmq ctl checkpoint: {} {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            }
        }
    }

    /// What `storage` needs before its backend starts: the key; a fresh (empty) thin disk.
    fn prepare(&self, storage: DiskSetup) -> Result<()> {
        match storage {
            DiskSetup::Encrypted => {
                let key: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5c).collect();
                let path = self.key_file();
                fs::write(&path, key)
                    .map_err(|e| BenchError::io(format!("writing {}", path.display()), e))
            }
            // One checkpoint, begun afresh each run: no map left from the run before.
            DiskSetup::Tracked => {
                let _ = fs::remove_file(self.beside_disk(".changes"));
                Ok(())
            }
            DiskSetup::Thin { copied: false } => {
                let disk = self.thin_disk(false);
                let _ = fs::remove_file(thin_map(&disk));
                let _ = fs::remove_file(disk);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Waits until the copied thin disk holds every block (its `base-fill=on` is done: at
    /// once after the first run): every bit after the map's 4096-byte header is set
    /// (`backend/thin/map.rs`).
    fn wait_filled(&self) -> Result<()> {
        let map = thin_map(&self.thin_disk(true));
        let bits = (self.disk_size / u64::from(SPREAD_STRIDE)).div_ceil(8);
        let deadline = Instant::now() + FILL_TIMEOUT;
        loop {
            let full = fs::read(&map).is_ok_and(|m| {
                m.len() as u64 >= 4096 + bits && m[4096..].iter().all(|b| *b == 0xff)
            });
            if full {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Backend(format!(
                    "{} not filled from the base in {} s",
                    map.display(),
                    FILL_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn command(&self, system: System, queues: usize, socket: &Path) -> Result<Command> {
        let disk = self.disk.display();
        let sock = socket.display();
        match system {
            System::BareMetal
            | System::BareMetalPageCache
            | System::BareMetalPsync
            | System::BareMetalPageCachePsync => {
                Err(BenchError::Backend("bare metal has no process".into()))
            }
            System::Vbmq {
                mode,
                batch,
                storage,
            } => {
                let size = self.disk_size;
                let storage = match storage {
                    DiskSetup::File | DiskSetup::Snapshotting => format!("path={disk}"),
                    DiskSetup::Tracked => format!("path={disk},track-changes=on"),
                    DiskSetup::PageCache => format!("path={disk},direct=off"),
                    DiskSetup::Memory => format!("mem={size},image={disk}"),
                    DiskSetup::Cache { percent } => format!(
                        "path={disk},cache={},cache-preload=on",
                        size * u64::from(percent) / 100
                    ),
                    DiskSetup::Null => format!("null={size}"),
                    DiskSetup::FileRing => format!("path={disk},io=ring"),
                    DiskSetup::Encrypted => format!(
                        "path={disk},encrypt=aes-xts,key-file={}",
                        self.key_file().display()
                    ),
                    DiskSetup::Thin { copied } => {
                        let fill = if copied { ",base-fill=on" } else { "" };
                        let thin = self.thin_disk(copied);
                        format!("path={},base={disk}{fill}", thin.display())
                    }
                };
                // Queue i's thread on backend CPU i, round robin when queues outnumber them.
                let cpus: Vec<usize> = (0..queues)
                    .map(|i| self.backend_cpus[i % self.backend_cpus.len().max(1)])
                    .collect();
                let mut spec = format!(
                    "socket={sock},{storage},queues={queues},mode={},cpus={}",
                    mode.as_str(),
                    cpu_list(&cpus)
                );
                if !batch {
                    spec.push_str(",batch=off");
                }
                let mut cmd = Command::new(&self.vbmq);
                cmd.args(["serve", "--disk", &spec]);
                Ok(cmd)
            }
            System::QsdBaseline | System::QsdVbdp | System::QsdNull | System::QsdPageCache => {
                let qsd = self.qsd.as_ref().ok_or_else(|| {
                    BenchError::Backend("qemu-storage-daemon is not installed".into())
                })?;
                let blockdev = if system == System::QsdNull {
                    format!(
                        "driver=null-co,node-name=disk0,size={},read-zeroes=on",
                        self.disk_size
                    )
                } else {
                    let direct = if system == System::QsdPageCache {
                        "off"
                    } else {
                        "on"
                    };
                    format!(
                        "driver=file,node-name=disk0,filename={disk},cache.direct={direct},\
                         aio=io_uring"
                    )
                };
                let mut export = format!(
                    "type=vhost-user-blk,id=exp0,node-name=disk0,addr.type=unix,\
                     addr.path={sock},writable=on,num-queues={queues}"
                );
                let mut cmd = Command::new(qsd);
                cmd.args(["--blockdev", &blockdev]);
                if system != System::QsdBaseline {
                    cmd.args(["--object", "iothread,id=iot0"]);
                    export.push_str(",iothread=iot0");
                }
                cmd.args(["--export", &export]);
                Ok(cmd)
            }
        }
    }
}

/// Whether `system` is started with a control socket (`vbmq serve --control`): the disks a
/// `vbmq ctl` command prepares or loads.
fn needs_control(system: System) -> bool {
    matches!(
        system,
        System::Vbmq {
            storage: DiskSetup::Tracked | DiskSetup::Snapshotting,
            ..
        }
    )
}

/// The arguments of `vbmq ctl` that begin the checkpoint `bench` of the disk at `socket`.
fn ctl_checkpoint<'a>(control: &'a Path, socket: &'a Path) -> [&'a std::ffi::OsStr; 6] {
    [
        "ctl".as_ref(),
        "--control".as_ref(),
        control.as_os_str(),
        "checkpoint".as_ref(),
        socket.as_os_str(),
        "bench".as_ref(),
    ]
}

/// How long a copied thin disk may take to fill from the base.
const FILL_TIMEOUT: Duration = Duration::from_secs(300);

/// The map file beside a thin disk's DISK.
fn thin_map(disk: &Path) -> PathBuf {
    let mut name = disk.as_os_str().to_owned();
    name.push(".map");
    PathBuf::from(name)
}

/// Finds `name` in `PATH`.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::{DiskSetup, WaitMode};

    fn launcher() -> Launcher {
        Launcher {
            vbmq: "/bin/vbmq".into(),
            qsd: Some("/usr/bin/qemu-storage-daemon".into()),
            disk: "/dev/shm/d.raw".into(),
            disk_size: 1 << 30,
            run_dir: "/tmp/r".into(),
            backend_cpus: vec![1],
        }
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn vbmq_command_follows_the_cli_contract() {
        let sock = Path::new("/tmp/r/s.sock");
        let cmd = launcher()
            .command(System::vbmq(WaitMode::Poll).unbatched(), 1, sock)
            .unwrap();
        assert_eq!(
            args(&cmd),
            [
                "serve",
                "--disk",
                "socket=/tmp/r/s.sock,path=/dev/shm/d.raw,queues=1,mode=poll,cpus=1,batch=off"
            ]
        );
        let cmd = launcher()
            .command(System::vbmq_null(WaitMode::Adaptive), 3, sock)
            .unwrap();
        assert!(args(&cmd)[2].contains(",null=1073741824,"));
        assert!(args(&cmd)[2].ends_with(",queues=3,mode=adaptive,cpus=1,1,1"));
        let mem = System::vbmq_on(DiskSetup::Memory, WaitMode::Event);
        let cmd = launcher().command(mem, 1, sock).unwrap();
        assert!(args(&cmd)[2].contains(",mem=1073741824,image=/dev/shm/d.raw,"));
        let cached = System::vbmq_on(DiskSetup::PageCache, WaitMode::Event);
        let cmd = launcher().command(cached, 1, sock).unwrap();
        assert!(args(&cmd)[2].contains(",path=/dev/shm/d.raw,direct=off,"));
        let crypt = System::vbmq_on(DiskSetup::Encrypted, WaitMode::Poll);
        let cmd = launcher().command(crypt, 1, sock).unwrap();
        assert!(
            args(&cmd)[2]
                .contains(",path=/dev/shm/d.raw,encrypt=aes-xts,key-file=/tmp/r/bench.key,")
        );
        let thin = System::vbmq_on(DiskSetup::Thin { copied: true }, WaitMode::Poll);
        let cmd = launcher().command(thin, 1, sock).unwrap();
        assert!(
            args(&cmd)[2]
                .contains(",path=/dev/shm/d.raw.thin-copied,base=/dev/shm/d.raw,base-fill=on,")
        );
        let tracked = System::vbmq_on(DiskSetup::Tracked, WaitMode::Poll);
        let cmd = launcher().command(tracked, 1, sock).unwrap();
        assert!(args(&cmd)[2].contains(",path=/dev/shm/d.raw,track-changes=on,"));
        let during = System::vbmq_on(DiskSetup::Snapshotting, WaitMode::Poll);
        let cmd = launcher().command(during, 1, sock).unwrap();
        assert!(args(&cmd)[2].contains(",path=/dev/shm/d.raw,queues=1,"));
        // Two polling queues on one backend CPU: its one thread serves both.
        let cmd = launcher()
            .command(System::vbmq(WaitMode::Poll), 2, sock)
            .unwrap();
        assert!(args(&cmd)[2].ends_with(",queues=2,mode=poll,cpus=1,1"));
    }

    #[test]
    fn only_disks_driven_by_vbmq_ctl_get_a_control_socket() {
        let on = |storage| System::vbmq_on(storage, WaitMode::Poll);
        assert!(needs_control(on(DiskSetup::Tracked)));
        assert!(needs_control(on(DiskSetup::Snapshotting)));
        assert!(!needs_control(on(DiskSetup::File)));
        assert!(!needs_control(System::QsdVbdp));
        let args = ctl_checkpoint(Path::new("/r/c.ctl"), Path::new("/r/d.sock"));
        let args: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        assert_eq!(
            args,
            [
                "ctl",
                "--control",
                "/r/c.ctl",
                "checkpoint",
                "/r/d.sock",
                "bench"
            ]
        );
        assert_eq!(
            launcher().snapshot_file(),
            Path::new("/dev/shm/d.raw.snapshot")
        );
    }

    #[test]
    fn qsd_commands_differ_only_where_the_systems_do() {
        let sock = Path::new("/s.sock");
        let l = launcher();
        let base = args(&l.command(System::QsdBaseline, 1, sock).unwrap()).join(" ");
        let vbdp = args(&l.command(System::QsdVbdp, 4, sock).unwrap()).join(" ");
        let null = args(&l.command(System::QsdNull, 1, sock).unwrap()).join(" ");
        assert!(!base.contains("iothread"));
        assert!(base.contains("cache.direct=on,aio=io_uring"));
        assert!(vbdp.contains("--object iothread,id=iot0"));
        assert!(vbdp.contains("num-queues=4,iothread=iot0"));
        assert!(null.contains("driver=null-co"));
        assert!(null.contains("iothread=iot0"));
        let mut no_qsd = launcher();
        no_qsd.qsd = None;
        assert!(no_qsd.command(System::QsdVbdp, 1, sock).is_err());
    }

    #[test]
    fn bare_metal_targets_the_file() {
        let running = launcher().launch(System::BareMetal, 1, 0).unwrap();
        assert!(matches!(running.target(),
            Target::File { path, direct: true } if path == Path::new("/dev/shm/d.raw")));
        let running = launcher().launch(System::BareMetalPageCache, 1, 0).unwrap();
        assert!(matches!(
            running.target(),
            Target::File { direct: false, .. }
        ));
        assert_eq!(running.pid(), None);
        let running = launcher().launch(System::BareMetalPsync, 1, 0).unwrap();
        assert!(matches!(
            running.target(),
            Target::FileSync { direct: true, .. }
        ));
        let running = launcher()
            .launch(System::BareMetalPageCachePsync, 1, 0)
            .unwrap();
        assert!(matches!(
            running.target(),
            Target::FileSync { path, direct: false } if path == Path::new("/dev/shm/d.raw")));
    }

    #[test]
    fn failing_backend_is_reported_with_its_output() {
        let dir = std::env::temp_dir().join(format!("vbmq-sys-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut l = launcher();
        l.run_dir = dir.clone();
        l.backend_cpus = super::super::cpus::CpuPlan::detect().unwrap().backend;
        // `false` ignores its arguments and exits 1 without creating a socket.
        l.vbmq = find_in_path("false").unwrap();
        let err = l.launch(System::vbmq(WaitMode::Poll), 1, 0).unwrap_err();
        assert!(
            err.to_string().contains("exited before it was ready"),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
