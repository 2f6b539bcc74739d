//! The declared command line: `vbmq serve`, `vbmq bench`, `vbmq ctl`.

use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};
use vbmq::config::{DiskSpec, FS_KEYS, FsSpec, disk_keys_help};
use vbmq::serve::ServeOptions;
use vbmq::worker::online_cpus;

/// What the command line asks for.
pub enum Job {
    /// Serve disks until SIGTERM or SIGINT, with a control socket, a metrics address and the
    /// state file of the disks added at run time.
    Serve(
        ServeOptions,
        Option<PathBuf>,
        Option<std::net::SocketAddr>,
        Option<PathBuf>,
    ),
    /// Run the benchmark.
    Bench(vbmq_bench::Options),
    /// Send one request to a running `vbmq serve`.
    Ctl(crate::ctl::Request),
    /// `vbmq image create`: write a new qcow2 image.
    ImageCreate(PathBuf, vbmq::backend::Qcow2CreateOptions),
}

/// The whole command line, with every flag and `--disk` key described.
pub fn command() -> Command {
    Command::new("vbmq")
        .about("Serves disks to virtual machines over vhost-user-blk, one pinned I/O thread per virtqueue")
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(serve())
        .subcommand(bench())
        .subcommand(ctl())
        .subcommand(crate::image_create::command())
        .subcommand(virtiofsd())
        .subcommand(vhost_user_blk())
}

/// Listed for `vbmq --help` only: `main` reads `vbmq vhost-user-blk ...` itself, before clap.
fn vhost_user_blk() -> Command {
    Command::new("vhost-user-blk")
        .about(
            "Serve one disk with QEMU's vhost-user block backend conventions (--socket-path|--fd, \
             --blk-file, --read-only; also when started as `vbmq-vhost-user-blk`): \
             vbmq vhost-user-blk --help lists the options",
        )
        .disable_help_flag(true)
        .arg(
            Arg::new("options")
                .num_args(0..)
                .trailing_var_arg(true)
                .allow_hyphen_values(true),
        )
}

/// Listed for `vbmq --help` only: `main` reads `vbmq virtiofsd ...` itself, before clap.
fn virtiofsd() -> Command {
    Command::new("virtiofsd")
        .about(
            "Serve one share with virtiofsd's command line (also when started as `virtiofsd`), \
             for libvirt, Kata, KubeVirt, Proxmox: vbmq virtiofsd --help lists the options",
        )
        .disable_help_flag(true)
        .arg(
            Arg::new("options")
                .num_args(0..)
                .trailing_var_arg(true)
                .allow_hyphen_values(true),
        )
}

fn ctl() -> Command {
    let socket = || {
        Arg::new("socket")
            .value_name("SOCKET")
            .value_parser(value_parser!(PathBuf))
    };
    Command::new("ctl")
        .about(
            "Ask a running `vbmq serve --control PATH`: add, remove, list disks and shares, read \
             counters",
        )
        .arg(control_arg().required(true))
        .arg(state_arg().help(
            "Record the disks added and removed here, for `vbmq serve --state FILE` to serve \
             again after a restart",
        ))
        .subcommand_required(true)
        .subcommand(
            Command::new("add-disk")
                .about("Serve one more disk; SPEC is exactly a --disk value")
                .arg(Arg::new("spec").value_name("SPEC").required(true)),
        )
        .subcommand(
            Command::new("remove-disk")
                .about("Drain, disconnect and stop the disk on SOCKET")
                .arg(socket().required(true)),
        )
        .subcommand(
            Command::new("add-fs")
                .about(
                    "Share one more directory; SPEC is exactly an --fs value. This command opens \
                     the directory and binds the socket, and hands both to vbmq; the directory \
                     must lie beneath an --fs-root of the daemon",
                )
                .arg(Arg::new("spec").value_name("SPEC").required(true)),
        )
        .subcommand(
            Command::new("remove-fs")
                .about("Disconnect and stop the share on SOCKET, and remove its socket")
                .arg(socket().required(true)),
        )
        .subcommand(
            Command::new("resize")
                .about(
                    "Give the disk on SOCKET a new capacity (a file grows; the guest sees it at \
                     once); shrinking needs --force",
                )
                .arg(socket().required(true))
                .arg(Arg::new("size").value_name("SIZE").required(true))
                .arg(
                    Arg::new("force")
                        .long("force")
                        .action(ArgAction::SetTrue)
                        .help("Shrink: what lies past the new end is lost"),
                ),
        )
        .subcommand(
            Command::new("set-limits")
                .about(
                    "I/O limits of the disk on SOCKET, across its queues: iops=N, bps=SIZE, \
                     read-/write- forms, iops-burst, bps-burst; `none` removes them",
                )
                .arg(socket().required(true))
                .arg(Arg::new("limits").value_name("LIMITS").required(true)),
        )
        .subcommand(
            Command::new("reload")
                .about(
                    "Read the --config file again, checked whole first: limit changes apply in \
                     place, disks no longer in it go, new ones come; anything else refuses it",
                )
                .arg(
                    Arg::new("replace")
                        .long("replace")
                        .action(ArgAction::SetTrue)
                        .help("Remove and add a disk whose line changed beyond its limits"),
                ),
        )
        .subcommand(
            Command::new("snapshot")
                .about(
                    "Write the disk on SOCKET as it is at one instant into FILE (made 0600 by \
                     this command) while the guest keeps writing; returns once FILE is complete \
                     and synced (JSON: method, bytes, duration)",
                )
                .arg(socket().required(true))
                .arg(
                    Arg::new("file")
                        .value_name("FILE")
                        .value_parser(value_parser!(PathBuf))
                        .required(true),
                )
                .arg(
                    Arg::new("force")
                        .long("force")
                        .action(ArgAction::SetTrue)
                        .help("Overwrite FILE if it exists"),
                )
                .arg(Arg::new("name").long("name").value_name("NAME").help(
                    "Also begin changed-block map NAME at the snapshot's instant \
                             (track-changes=on disks): changed-blocks --since NAME then lists \
                             every block that differs from FILE",
                )),
        )
        .subcommand(
            Command::new("export-begin")
                .about(
                    "Serve the disk on SOCKET as it is at this instant, read-only, to NBD clients \
                     on NBD_ADDR (unix:PATH, bound 0600 by this command, or tcp:HOST:PORT with \
                     --tls-creds: TLS only) while the guest keeps \
                     writing; what the guest overwrites is saved first into an unnamed scratch \
                     file beside the image (JSON: address, bytes, block_size)",
                )
                .arg(socket().required(true))
                .arg(Arg::new("address").value_name("NBD_ADDR").required(true))
                .arg(
                    Arg::new("scratch-dir")
                        .long("scratch-dir")
                        .value_name("DIR")
                        .value_parser(value_parser!(PathBuf))
                        .help("Make the scratch file in DIR instead of the image's directory"),
                )
                .arg(
                    Arg::new("bitmaps")
                        .long("bitmaps")
                        .value_name("CHECKPOINT,...")
                        .value_delimiter(',')
                        .help(
                            "Serve each checkpoint's changed blocks up to the export's instant \
                             as the metadata context qemu:dirty-bitmap:CHECKPOINT \
                             (track-changes=on disks)",
                        ),
                )
                .arg(
                    Arg::new("checkpoint")
                        .long("checkpoint")
                        .value_name("NEW")
                        .help(
                            "Begin checkpoint NEW at the export's instant: the next incremental \
                     backup asks for --bitmaps NEW",
                        ),
                )
                .arg(
                    Arg::new("tls-creds")
                        .long("tls-creds")
                        .value_name("DIR")
                        .value_parser(value_parser!(PathBuf))
                        .help(
                            "tcp: only: serve with TLS, DIR holding ca-cert.pem, \
                             server-cert.pem and server-key.pem (QEMU's tls-creds-x509 layout)",
                        ),
                )
                .arg(
                    Arg::new("tls-verify-peer")
                        .long("tls-verify-peer")
                        .action(ArgAction::SetTrue)
                        .requires("tls-creds")
                        .help(
                            "Clients must present a certificate signed by DIR/ca-cert.pem \
                             (QEMU's verify-peer=on)",
                        ),
                )
                .arg(
                    Arg::new("writable")
                        .long("writable")
                        .action(ArgAction::SetTrue)
                        .conflicts_with("scratch-dir")
                        .help(
                            "Serve the disk, which no guest has started on, for reading and \
                             writing through its stack (a mirror's destination); a guest's \
                             first ring ends the export",
                        ),
                ),
        )
        .subcommand(
            Command::new("mirror-begin")
                .about(
                    "Mirror the disk on SOCKET to the NBD export NBD_URI \
                     (nbd+unix:///NAME?socket=PATH, or nbds://HOST:PORT/NAME over TLS; \
                     connected by this command): a background \
                     copy, and every guest write to both sides before it completes; a failing \
                     destination fails the mirror, never the guest (JSON: state, copied, total)",
                )
                .arg(socket().required(true))
                .arg(Arg::new("uri").value_name("NBD_URI").required(true))
                .arg(
                    Arg::new("tls-creds")
                        .long("tls-creds")
                        .value_name("DIR")
                        .value_parser(value_parser!(PathBuf))
                        .help(
                            "nbds:// only: DIR holds ca-cert.pem, which the server's certificate \
                             must chain to, and client-cert.pem and client-key.pem if the \
                             server verifies its clients (or the URI's tls-certificates=DIR)",
                        ),
                )
                .arg(
                    Arg::new("wait-ready")
                        .long("wait-ready")
                        .action(ArgAction::SetTrue)
                        .help("Return once the destination holds everything, or the mirror failed"),
                )
                .arg(
                    Arg::new("resume")
                        .long("resume")
                        .action(ArgAction::SetTrue)
                        .help(
                            "After the disk's mirror failed (a cut), to the same destination \
                             back again: copy only what it may miss",
                        ),
                )
                .arg(
                    Arg::new("timeout")
                        .long("timeout")
                        .value_name("SECS")
                        .value_parser(value_parser!(u64).range(1..=3600))
                        .help(
                            "Fail the mirror once the destination answers nothing for SECS \
                             (default 30)",
                        ),
                ),
        )
        .subcommand(
            Command::new("mirror-end")
                .about(
                    "Stop mirroring the disk on SOCKET: its destination is flushed and \
                     disconnected (JSON: the mirror's last state)",
                )
                .arg(socket().required(true)),
        )
        .subcommand(
            Command::new("export-end")
                .about(
                    "End the export of the disk on SOCKET at NBD_ADDR: its clients are \
                     disconnected and its scratch file discarded",
                )
                .arg(socket().required(true))
                .arg(Arg::new("address").value_name("NBD_ADDR").required(true)),
        )
        .subcommand(
            Command::new("checkpoint")
                .about(
                    "Start a named changed-block map on the track-changes=on disk on SOCKET, at \
                     this instant (NAME: 1 to 64 of A-Z a-z 0-9 . _ -; 16 at most)",
                )
                .arg(socket().required(true))
                .arg(Arg::new("name").value_name("NAME").required(true)),
        )
        .subcommand(
            Command::new("changed-blocks")
                .about(
                    "The extents written since checkpoint NAME began, as JSON; exit 1 with the \
                     reason when there are none to trust (an invalid or unknown map: take a \
                     full backup)",
                )
                .arg(socket().required(true))
                .arg(
                    Arg::new("since")
                        .long("since")
                        .value_name("NAME")
                        .required(true),
                ),
        )
        .subcommand(
            Command::new("forget-checkpoint")
                .about("Drop the changed-block map NAME of the disk on SOCKET")
                .arg(socket().required(true))
                .arg(Arg::new("name").value_name("NAME").required(true)),
        )
        .subcommand(Command::new("list").about(
            "Every disk (spec, size, queues, connection) and share (spec, tag, directory, \
             connection), as JSON",
        ))
        .subcommand(
            Command::new("stats")
                .about("Per-queue counters of every disk and share, or of the one on SOCKET (JSON)")
                .arg(socket()),
        )
}

fn state_arg() -> Arg {
    Arg::new("state")
        .long("state")
        .value_name("FILE")
        .value_parser(value_parser!(PathBuf))
}

fn control_arg() -> Arg {
    Arg::new("control")
        .long("control")
        .value_name("PATH")
        .value_parser(value_parser!(PathBuf))
}

fn serve() -> Command {
    Command::new("serve")
        .about("Serve disks until SIGTERM or SIGINT (SIGUSR1 prints per-queue counters)")
        .arg(
            Arg::new("disk")
                .long("disk")
                .value_name("KEY=VALUE,...")
                .action(ArgAction::Append)
                .required_unless_present_any(["control", "config", "fs"])
                .value_parser(parse_disk)
                .help("A disk to serve, on its own socket; repeat for more (keys below)"),
        )
        .arg(
            Arg::new("fs")
                .long("fs")
                .value_name("KEY=VALUE,...")
                .action(ArgAction::Append)
                .value_parser(parse_fs)
                .help(
                    "A host directory to share with guests over vhost-user-fs (mount -t virtiofs \
                     TAG); repeat for more (keys below)",
                ),
        )
        .arg(
            Arg::new("fs-root")
                .long("fs-root")
                .value_name("DIR")
                .action(ArgAction::Append)
                .value_parser(value_parser!(PathBuf))
                .help(
                    "`vbmq ctl add-fs` may share directories beneath DIR (the confinement lets \
                     shares reach beneath it from start); repeat for more",
                ),
        )
        .arg(
            Arg::new("seccomp")
                .long("seccomp")
                .value_name("on|off")
                .default_value("on")
                .value_parser(["on", "off"])
                .help("The system-call filter; off is for debugging only"),
        )
        .arg(control_arg().help(
            "A control socket (0600) for `vbmq ctl`; run-time disks' sockets go in its directory",
        ))
        .arg(
            Arg::new("run-time-rings")
                .long("run-time-rings")
                .value_name("N")
                .value_parser(value_parser!(usize))
                .help(
                    "Spare io_uring rings made at start for `vbmq ctl add-disk path=` disks, one \
                     per queue (about 650 KiB each); 0: such disks go without io_uring \
                     [default: 4 per CPU, at most 16]",
                ),
        )
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .value_parser(value_parser!(PathBuf))
                .help(
                    "TOML: disk = [\"--disk values\"], fs = [\"--fs values\"], control, metrics \
                     (docs/operate.md); disks read again on SIGHUP or `vbmq ctl reload`",
                ),
        )
        .arg(state_arg().help(
            "Serve again, at start, the disks `vbmq ctl --state FILE add-disk` recorded \
             (docs/operate.md)",
        ))
        .arg(
            Arg::new("metrics")
                .long("metrics")
                .value_name("ADDR:PORT")
                .value_parser(value_parser!(std::net::SocketAddr))
                .help("Serve Prometheus metrics at http://ADDR:PORT/metrics (e.g. 127.0.0.1:9850)"),
        )
        .after_help(format!("{}\n{}", disk_keys_help(), fs_keys_help()))
}

fn bench() -> Command {
    Command::new("bench")
        .about(
            "Measure vbmq beside bare metal and qemu-storage-daemon on a 1 GiB random-filled \
             file on tmpfs, and write report.json, report.md and SVG charts",
        )
        .arg(
            Arg::new("quick")
                .long("quick")
                .action(ArgAction::SetTrue)
                .help("About a minute instead of a few minutes: shorter runs, fewer cases"),
        )
        .arg(
            Arg::new("out")
                .long("out")
                .value_name("DIR")
                .value_parser(value_parser!(PathBuf))
                .help("Where the report goes [default: ./vbmq-bench-<date>/]"),
        )
        .arg(Arg::new("only").long("only").value_name("TEXT").help(
            "Run only the cases and systems whose identifier contains TEXT \
                     (e.g. matrix/randread-4k-qd32, qsd-vbdp, vbmq-poll)",
        ))
}

fn fs_keys_help() -> String {
    let mut help = String::from("--fs keys:\n");
    for (key, about) in FS_KEYS {
        help.push_str(&format!("  {key:<24} {about}\n"));
    }
    help
}

fn parse_fs(text: &str) -> Result<FsSpec, String> {
    FsSpec::parse(text, &online_cpus()).map_err(|e| e.to_string())
}

fn parse_disk(text: &str) -> Result<DiskSpec, String> {
    DiskSpec::parse(text, &online_cpus()).map_err(|e| e.to_string())
}

/// The job `matches` asks for.
pub fn job(matches: &ArgMatches) -> Option<Job> {
    match matches.subcommand()? {
        ("serve", m) => Some(Job::Serve(
            ServeOptions {
                disks: m
                    .get_many::<DiskSpec>("disk")
                    .map(|d| d.cloned().collect())
                    .unwrap_or_default(),
                texts: m
                    .get_raw("disk")
                    .map(|d| d.map(|t| t.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default(),
                shares: m
                    .get_many::<FsSpec>("fs")
                    .map(|d| d.cloned().collect())
                    .unwrap_or_default(),
                fs_roots: m
                    .get_many::<PathBuf>("fs-root")
                    .map(|d| d.cloned().collect())
                    .unwrap_or_default(),
                share_texts: m
                    .get_raw("fs")
                    .map(|d| d.map(|t| t.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default(),
                seccomp: m.get_one::<String>("seccomp").is_none_or(|s| s == "on"),
                control_dir: m
                    .get_one::<PathBuf>("control")
                    .map(|p| crate::control::socket_dir(p)),
                config: m.get_one::<PathBuf>("config").cloned(),
                ready_line: None,
                run_time_rings: m
                    .get_one::<usize>("run-time-rings")
                    .copied()
                    .unwrap_or_else(vbmq::backend::ring_pool::default_count),
                user_namespace: None,
                landlock_required: None,
            },
            m.get_one::<PathBuf>("control").cloned(),
            m.get_one::<std::net::SocketAddr>("metrics").copied(),
            m.get_one::<PathBuf>("state").cloned(),
        )),
        ("ctl", m) => {
            let control = m.get_one::<PathBuf>("control")?.clone();
            let socket = |m: &ArgMatches| {
                m.get_one::<PathBuf>("socket")
                    .map(|p| p.display().to_string())
            };
            use crate::control::Request;
            let mut snapshot = None;
            let mut scratch_dir = None;
            let mut tls_creds = None;
            let command = match m.subcommand()? {
                ("add-disk", a) => Request::AddDisk {
                    spec: a.get_one::<String>("spec")?.clone(),
                    fds: Vec::new(),
                },
                ("remove-disk", a) => Request::RemoveDisk { socket: socket(a)? },
                ("add-fs", a) => Request::AddFs {
                    spec: a.get_one::<String>("spec")?.clone(),
                    mount: false,
                },
                ("remove-fs", a) => Request::RemoveFs { socket: socket(a)? },
                ("resize", a) => Request::Resize {
                    socket: socket(a)?,
                    size: Some(crate::control::protocol::Size::Text(
                        a.get_one::<String>("size")?.clone(),
                    )),
                    force: a.get_flag("force"),
                },
                ("set-limits", a) => Request::SetLimits {
                    socket: socket(a)?,
                    limits: a.get_one::<String>("limits")?.clone(),
                },
                ("reload", a) => Request::Reload {
                    replace: a.get_flag("replace"),
                },
                ("snapshot", a) => {
                    snapshot = Some(crate::ctl_snapshot::Target {
                        path: a.get_one::<PathBuf>("file")?.clone(),
                        force: a.get_flag("force"),
                    });
                    Request::Snapshot {
                        socket: socket(a)?,
                        name: a.get_one::<String>("name").cloned(),
                    }
                }
                ("export-begin", a) if a.get_flag("writable") => {
                    tls_creds = a.get_one::<PathBuf>("tls-creds").cloned();
                    Request::ExportBeginWritable {
                        socket: socket(a)?,
                        address: a.get_one::<String>("address")?.clone(),
                        tls_verify_peer: a.get_flag("tls-verify-peer"),
                    }
                }
                ("export-begin", a) => {
                    scratch_dir = a.get_one::<PathBuf>("scratch-dir").cloned();
                    tls_creds = a.get_one::<PathBuf>("tls-creds").cloned();
                    Request::ExportBegin {
                        socket: socket(a)?,
                        address: a.get_one::<String>("address")?.clone(),
                        tls_verify_peer: a.get_flag("tls-verify-peer"),
                        bitmaps: a
                            .get_many::<String>("bitmaps")
                            .map(|names| names.cloned().collect())
                            .unwrap_or_default(),
                        checkpoint: a.get_one::<String>("checkpoint").cloned(),
                    }
                }
                ("mirror-begin", a) => {
                    tls_creds = a.get_one::<PathBuf>("tls-creds").cloned();
                    Request::MirrorBegin {
                        socket: socket(a)?,
                        destination: a.get_one::<String>("uri")?.clone(),
                        wait_ready: a.get_flag("wait-ready"),
                        resume: a.get_flag("resume"),
                        timeout_secs: a.get_one::<u64>("timeout").copied(),
                    }
                }
                ("mirror-end", a) => Request::MirrorEnd { socket: socket(a)? },
                ("export-end", a) => Request::ExportEnd {
                    socket: socket(a)?,
                    address: a.get_one::<String>("address")?.clone(),
                },
                ("checkpoint", a) => Request::Checkpoint {
                    socket: socket(a)?,
                    name: a.get_one::<String>("name")?.clone(),
                },
                ("changed-blocks", a) => Request::ChangedBlocks {
                    socket: socket(a)?,
                    since: a.get_one::<String>("since")?.clone(),
                },
                ("forget-checkpoint", a) => Request::ForgetCheckpoint {
                    socket: socket(a)?,
                    name: a.get_one::<String>("name")?.clone(),
                },
                ("list", _) => Request::List,
                ("stats", a) => Request::Stats { socket: socket(a) },
                _ => return None,
            };
            let state = m.get_one::<PathBuf>("state").cloned();
            Some(Job::Ctl(crate::ctl::Request {
                control,
                command,
                state,
                snapshot,
                scratch_dir,
                tls_creds,
            }))
        }
        ("image", m) => {
            let (path, options) = crate::image_create::job(m)?;
            Some(Job::ImageCreate(path, options))
        }
        ("bench", m) => Some(Job::Bench(vbmq_bench::Options {
            quick: m.get_flag("quick"),
            out: m.get_one::<PathBuf>("out").cloned(),
            only: m.get_one::<String>("only").cloned(),
        })),
        _ => None,
    }
}
