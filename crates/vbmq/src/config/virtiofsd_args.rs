//! `vbmq virtiofsd`: virtiofsd's command line (1.14, and the legacy `-o` form libvirt still
//! passes), read into one share's [`FsSpec`]. Management stacks (libvirt, Kata, KubeVirt,
//! Proxmox) start the virtio-fs backend themselves with these options; each is taken with
//! virtiofsd's meaning, or refused with one line when vbmq does not do what it asks.

use std::path::PathBuf;

use super::disk_spec::{check_cpus, cpus, queues, socket_group, wait_mode};
use super::fs_spec::FsSpec;
use crate::confine::{IdRange, UserNamespace};
use crate::virtio_fs::{FsCache, IdRule, OnError, TAG_LEN, check_xattrmap};

/// What `vbmq virtiofsd` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VirtiofsdCommand {
    /// Serve one share.
    Serve(Box<VirtiofsdArgs>),
    /// `--print-capabilities`: print the vhost-user backend capabilities (JSON) and exit.
    PrintCapabilities,
    /// `-h`, `--help`.
    Help,
    /// `-V`, `--version`.
    Version,
}

/// The share and how the process runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtiofsdArgs {
    /// The share.
    pub spec: FsSpec,
    /// Install vbmq's seccomp filter (`--seccomp none` turns it off).
    pub seccomp: bool,
    /// Log to syslog instead of stderr.
    pub syslog: bool,
    /// The log level (a `tracing` filter directive: error, warn, info, debug, trace, off).
    pub log_level: String,
    /// `--rlimit-nofile`: the descriptor limit to set (0: leave it).
    pub rlimit_nofile: Option<u64>,
    /// What was accepted with a difference from virtiofsd, to log once logging is set up.
    pub notes: Vec<String>,
    /// `--join CTL`: add the share to the running `vbmq serve` at this control socket instead
    /// of serving it in this process.
    pub join: Option<PathBuf>,
    /// `--uid-map`, `--gid-map`: the user namespace the share is served in.
    pub user_namespace: Option<UserNamespace>,
    /// `--sandbox namespace|chroot` as given (`-o sandbox=` too): a kernel wall is required,
    /// so the share is refused where Landlock is missing.
    pub sandbox: Option<String>,
}

/// The vhost-user backend capabilities `--print-capabilities` prints (QEMU's
/// `docs/interop/vhost-user.json`): `migrate-precopy`, as a share's state moves with the VM
/// (dirty logging and DEVICE_STATE, find-paths mode).
pub const VIRTIOFSD_CAPABILITIES: &str = "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\",\n    \"posix-acl-negotiation-mode\",\n    \"separate-options\"\n  ]\n}";

/// The options, for `--help`.
pub const VIRTIOFSD_HELP: &str = "\
Usage: vbmq virtiofsd --shared-dir DIR (--socket-path PATH | --fd N) [OPTIONS]
       (or the vbmq binary started as `virtiofsd`)

virtiofsd's options, with virtiofsd's meaning:
  --shared-dir DIR            the directory to share
  --socket-path PATH          the vhost-user socket to listen on (--socket: the same)
  --fd N                      an inherited socket, already listening (libvirt's)
  --socket-group GROUP        the socket's group (mode 0660)
  --tag TAG                   the tag, offered through vhost-user's CONFIG (QEMU keeps its own)
  --cache never|metadata|auto|always    what the guest may cache (default auto)
  --xattr                     serve extended attributes (default off)
  --posix-acl[=never|auto|always]       POSIX ACLs enforced by the guest (implies --xattr)
  --xattrmap RULES            translate xattr names (virtiofsd's rules: prefix, ok, bad,
                              unsupported, map; implies --xattr)
  --readonly                  refuse every change with EROFS
  --announce-submounts        tell the guest which directories are mount points (default)
  --no-announce-submounts     do not
  --allow-direct-io           honour O_DIRECT (default: dropped)
  --inode-file-handles[=never|prefer]   accepted; vbmq holds O_PATH descriptors
  --sandbox namespace|chroot|none       namespace, chroot: vbmq's Landlock wall, required (no
                              Landlock: refused); none: Landlock where the kernel has it
  --seccomp none|kill|log|trap          none: no seccomp filter; else vbmq's filter
  --thread-pool-size N        accepted; vbmq serves each queue on its own thread
  --rlimit-nofile N           the descriptor limit (0: unchanged; default: the hard limit)
  --syslog                    log to syslog
  --log-level error|warn|info|debug|trace|off   (default info; RUST_LOG wins)
  -d                          --log-level debug
  -f                          no effect (vbmq never daemonizes)
  -o OPT[,OPT...]             the legacy form: source=DIR, cache=none|auto|always|metadata,
                              xattr, no_xattr, xattrmap=RULES, posix_acl, no_posix_acl, announce_submounts,
                              allow_direct_io, no_allow_direct_io, sandbox=namespace|chroot,
                              log_level=LEVEL, flock, no_flock, posix_lock, no_posix_lock, debug
  --migration-mode find-paths          how a share's state migrates (the only mode; default)
  --migration-on-error abort|guest-error  a file held open that the destination cannot open
                              again: fail the migration (default) or the guest's use of it
  --migration-verify-handles, --migration-confirm-paths   accepted; vbmq always does both
  --print-capabilities        print the vhost-user backend capabilities (JSON) and exit
vbmq's own:
  --join CTL                  add the share to the running `vbmq serve --control CTL` instead
                              of serving it here; stays in the foreground, removes it on
                              SIGTERM (what --fs cannot say is refused: --xattrmap, ID maps)
  --queues N                  request queues, each on its own thread (default 1)
  --mode event|poll|adaptive  how the queue threads wait (default adaptive)
  --cpus LIST                 pin the queue threads
  --translate-uid, --translate-gid map:GUEST:HOST:N | guest:GUEST:HOST:N | host:HOST:GUEST:N
                              translate IDs (squash-* and forbid-guest are refused)
  --uid-map, --gid-map :GUEST:HOST:N:   serve the share in a user namespace with these maps, as
                              virtiofsd does (needs root; ID 0 mapped; one to one)
Refused (vbmq does not do it): --inode-file-handles=mandatory, --migration-mode file-handles,
and every other option.
";

/// Reads virtiofsd's arguments (after the program name). An error is one line.
pub fn parse_virtiofsd_args(
    args: &[String],
    online_cpus: &[usize],
) -> Result<VirtiofsdCommand, String> {
    let mut parser = Parser {
        args,
        at: 0,
        online_cpus,
        state: State::default(),
    };
    while let Some(arg) = parser.next_arg() {
        if let Some(command) = parser.one(&arg)? {
            return Ok(command);
        }
    }
    parser.state.finish()
}

#[derive(Default)]
struct State {
    dir: Option<PathBuf>,
    socket: Option<PathBuf>,
    fd: Option<i32>,
    group: Option<u32>,
    tag: Option<String>,
    cache: FsCache,
    xattr: bool,
    posix_acl: bool,
    readonly: bool,
    no_announce_submounts: bool,
    direct_io: bool,
    seccomp_off: bool,
    syslog: bool,
    log_level: Option<String>,
    rlimit_nofile: Option<u64>,
    queues: Option<usize>,
    mode: Option<crate::worker::WaitMode>,
    cpus: Vec<usize>,
    notes: Vec<String>,
    xattrmap: Option<String>,
    uids: Vec<IdRule>,
    gids: Vec<IdRule>,
    namespace_uids: Vec<IdRange>,
    namespace_gids: Vec<IdRange>,
    sandbox: Option<String>,
    migration_on_error: OnError,
    join: Option<PathBuf>,
}

struct Parser<'a> {
    args: &'a [String],
    at: usize,
    online_cpus: &'a [usize],
    state: State,
}

/// The options that take a value (`--name VALUE` or `--name=VALUE`).
const WITH_VALUE: &[&str] = &[
    "--shared-dir",
    "--socket-path",
    "--socket",
    "--fd",
    "--socket-group",
    "--tag",
    "--cache",
    "--sandbox",
    "--seccomp",
    "--thread-pool-size",
    "--rlimit-nofile",
    "--log-level",
    "--xattrmap",
    "--translate-uid",
    "--translate-gid",
    "--uid-map",
    "--gid-map",
    "--migration-mode",
    "--migration-on-error",
    "--queues",
    "--mode",
    "--cpus",
    "--join",
];

/// The options whose value is optional and attached (`--name` or `--name=VALUE`).
const OPTIONAL_VALUE: &[&str] = &["--posix-acl", "--inode-file-handles"];

impl Parser<'_> {
    fn next_arg(&mut self) -> Option<String> {
        let arg = self.args.get(self.at)?.clone();
        self.at += 1;
        Some(arg)
    }

    fn value(&mut self, name: &str, attached: Option<&str>) -> Result<String, String> {
        match attached {
            Some(value) => Ok(value.to_string()),
            None => self
                .next_arg()
                .ok_or_else(|| format!("{name}: a value is required")),
        }
    }

    /// One argument (and its value); a command that ends parsing.
    fn one(&mut self, arg: &str) -> Result<Option<VirtiofsdCommand>, String> {
        if let Some(rest) = arg.strip_prefix("-o") {
            let text = match rest.strip_prefix('=') {
                Some(value) => value.to_string(),
                None if rest.is_empty() => self.value("-o", None)?,
                None => rest.to_string(),
            };
            for option in text.split(',').filter(|o| !o.is_empty()) {
                self.legacy(option)?;
            }
            return Ok(None);
        }
        let (name, attached) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (arg, None),
        };
        if OPTIONAL_VALUE.contains(&name) {
            return self.optional(name, attached).map(|()| None);
        }
        if WITH_VALUE.contains(&name) {
            let value = self.value(name, attached)?;
            return self.valued(name, &value).map(|()| None);
        }
        if attached.is_some() {
            return Err(format!("{name} takes no value"));
        }
        let s = &mut self.state;
        match name {
            "--print-capabilities" => return Ok(Some(VirtiofsdCommand::PrintCapabilities)),
            "-h" | "--help" => return Ok(Some(VirtiofsdCommand::Help)),
            "-V" | "--version" => return Ok(Some(VirtiofsdCommand::Version)),
            "--xattr" => s.xattr = true,
            "--readonly" => s.readonly = true,
            "--announce-submounts" => s.no_announce_submounts = false,
            "--no-announce-submounts" => s.no_announce_submounts = true,
            "--allow-direct-io" => s.direct_io = true,
            "--syslog" => s.syslog = true,
            "-d" => s.log_level = Some("debug".into()),
            "-f" => {}
            // The source confirms each path leads to the inode it names, and the destination
            // refuses a path to another file (when both see one file system): always.
            "--migration-verify-handles" | "--migration-confirm-paths" => {}
            _ => return Err(format!("{name}: not an option vbmq virtiofsd takes")),
        }
        Ok(None)
    }

    fn optional(&mut self, name: &str, value: Option<&str>) -> Result<(), String> {
        let s = &mut self.state;
        match (name, value) {
            ("--posix-acl", None | Some("always" | "auto")) => s.posix_acl = true,
            ("--posix-acl", Some("never")) => s.posix_acl = false,
            // O_PATH descriptors are what `prefer` falls back to: within its meaning.
            ("--inode-file-handles", None | Some("never" | "prefer" | "fallback")) => {}
            ("--inode-file-handles", Some("mandatory")) => {
                return Err(
                    "--inode-file-handles=mandatory: vbmq refers to inodes by O_PATH \
                     descriptors, never by file handles"
                        .into(),
                );
            }
            (_, Some(value)) => return Err(format!("{name}: {value:?} is not a value it takes")),
            (_, None) => return Err(format!("{name}: a value is required")),
        }
        Ok(())
    }

    fn valued(&mut self, name: &str, value: &str) -> Result<(), String> {
        let bad = |what: &str| format!("{name}: {value:?}: {what}");
        let s = &mut self.state;
        match name {
            "--shared-dir" => s.dir = Some(PathBuf::from(value)),
            "--join" => s.join = Some(PathBuf::from(value)),
            "--migration-mode" if value == "find-paths" => {}
            "--migration-mode" if value == "file-handles" => {
                return Err(bad(
                    "vbmq migrates a share's state by paths only (find-paths)",
                ));
            }
            "--migration-mode" => return Err(bad("find-paths or file-handles")),
            "--migration-on-error" => {
                s.migration_on_error =
                    OnError::parse(value).ok_or_else(|| bad("abort or guest-error"))?;
            }
            "--socket-path" | "--socket" => s.socket = Some(PathBuf::from(value)),
            "--fd" => s.fd = Some(value.parse().map_err(|_| bad("not a descriptor number"))?),
            "--socket-group" => {
                s.group = Some(socket_group(name, value).map_err(|e| bad(&e.reason))?);
            }
            "--tag" => {
                if value.is_empty() || value.len() > TAG_LEN || value.contains('\0') {
                    return Err(bad(&format!("1 to {TAG_LEN} bytes, no NUL")));
                }
                s.tag = Some(value.to_string());
            }
            "--cache" => {
                s.cache =
                    FsCache::parse(value).ok_or_else(|| bad("never, metadata, auto or always"))?;
            }
            "--sandbox" => match value {
                "namespace" | "chroot" => s.sandbox = Some(format!("--sandbox {value}")),
                "none" => s.sandbox = None,
                _ => return Err(bad("namespace, chroot or none")),
            },
            "--seccomp" => match value {
                "none" => s.seccomp_off = true,
                "kill" | "trap" => s.seccomp_off = false,
                "log" => {
                    s.seccomp_off = false;
                    s.notes.push(
                        "--seccomp log: vbmq has no log-only filter; a forbidden system call \
                         is reported and ends the process, as with kill"
                            .into(),
                    );
                }
                _ => return Err(bad("none, kill, log or trap")),
            },
            "--thread-pool-size" => {
                value.parse::<u32>().map_err(|_| bad("not a number"))?;
            }
            "--rlimit-nofile" => {
                s.rlimit_nofile = Some(value.parse().map_err(|_| bad("not a number"))?);
            }
            "--log-level" => {
                s.log_level = Some(
                    log_level(value)
                        .ok_or_else(|| bad("error, warn, info, debug, trace or off"))?,
                )
            }
            "--xattrmap" => {
                check_xattrmap(value).map_err(|e| bad(&e))?;
                s.xattrmap = Some(value.to_string());
            }
            "--translate-uid" | "--translate-gid" => {
                let rule = IdRule::parse_translate(value).map_err(|e| bad(&e))?;
                if name == "--translate-uid" {
                    s.uids.push(rule)
                } else {
                    s.gids.push(rule)
                }
            }
            // virtiofsd's user namespace maps: the share is served in such a namespace.
            "--uid-map" | "--gid-map" => {
                let rule = IdRule::parse_namespace(value).map_err(|e| bad(&e))?;
                let range = IdRange {
                    inside: rule.guest,
                    outside: rule.host,
                    count: rule.count,
                };
                if name == "--uid-map" {
                    s.namespace_uids.push(range)
                } else {
                    s.namespace_gids.push(range)
                }
            }
            "--queues" => s.queues = Some(queues(name, value).map_err(|e| bad(&e.reason))?),
            "--mode" => s.mode = Some(wait_mode(name, value).map_err(|e| bad(&e.reason))?),
            "--cpus" => s.cpus = cpus(name, value, self.online_cpus).map_err(|e| bad(&e.reason))?,
            _ => return Err(format!("{name}: not an option vbmq virtiofsd takes")),
        }
        Ok(())
    }

    /// One option of the legacy `-o` list.
    fn legacy(&mut self, option: &str) -> Result<(), String> {
        let bad = || format!("-o {option}: not an option vbmq virtiofsd takes");
        let s = &mut self.state;
        if let Some((key, value)) = option.split_once('=') {
            let bad_value = |what: &str| format!("-o {key}: {value:?}: {what}");
            match key {
                "source" => s.dir = Some(PathBuf::from(value)),
                "cache" => {
                    s.cache = FsCache::parse(value)
                        .ok_or_else(|| bad_value("none, metadata, auto or always"))?;
                }
                "sandbox" => match value {
                    "namespace" | "chroot" => s.sandbox = Some(format!("-o sandbox={value}")),
                    _ => return Err(bad_value("namespace or chroot")),
                },
                "log_level" | "loglevel" => {
                    let level = if value == "err" { "error" } else { value };
                    s.log_level = Some(
                        log_level(level).ok_or_else(|| bad_value("err, warn, info or debug"))?,
                    );
                }
                "xattrmap" => {
                    check_xattrmap(value).map_err(|e| bad_value(&e))?;
                    s.xattrmap = Some(value.to_string());
                }
                _ => return Err(bad()),
            }
            return Ok(());
        }
        match option {
            "xattr" => s.xattr = true,
            "no_xattr" => s.xattr = false,
            "posix_acl" => s.posix_acl = true,
            "no_posix_acl" => s.posix_acl = false,
            "announce_submounts" => s.no_announce_submounts = false,
            "allow_direct_io" => s.direct_io = true,
            "no_allow_direct_io" => s.direct_io = false,
            "debug" => s.log_level = Some("debug".into()),
            "no_flock" | "no_posix_lock" => {}
            // virtiofsd 1.14 refuses these; libvirt passes them for <lock posix='on'
            // flock='on'/>. As with virtiofsd's no_*, the guest kernel keeps its locks itself.
            "flock" | "posix_lock" => s.notes.push(format!(
                "-o {option}: locks are not forwarded to the host; the guest kernel keeps them \
                 among the guest's processes"
            )),
            _ => return Err(bad()),
        }
        Ok(())
    }
}

fn log_level(value: &str) -> Option<String> {
    matches!(value, "error" | "warn" | "info" | "debug" | "trace" | "off")
        .then(|| value.to_string())
}

impl State {
    fn finish(self) -> Result<VirtiofsdCommand, String> {
        let dir = self.dir.ok_or("missing --shared-dir or -o source")?;
        let socket = match (self.socket, self.fd) {
            (Some(_), Some(_)) => return Err("--fd and --socket-path exclude each other".into()),
            (None, None) => return Err("missing --socket-path or --fd".into()),
            (Some(socket), None) => socket,
            (None, Some(fd)) => {
                if self.group.is_some() {
                    return Err("--socket-group: not with --fd (the socket is not vbmq's)".into());
                }
                PathBuf::from(format!("descriptor {fd}"))
            }
        };
        let offer_config = self.tag.is_some();
        let mut spec = FsSpec::new(socket, dir, self.tag.unwrap_or_default());
        spec.offer_config = offer_config;
        spec.listen_fd = self.fd;
        if let Some(group) = self.group {
            spec.socket_group = Some(group);
            spec.socket_mode = 0o660;
        }
        spec.cache = self.cache;
        spec.xattr = self.xattr || self.posix_acl || self.xattrmap.is_some();
        spec.xattrmap = self.xattrmap;
        if self.posix_acl && !(self.uids.is_empty() && self.gids.is_empty()) {
            return Err("--posix-acl: not with translated IDs (the ACLs' IDs would not be)".into());
        }
        spec.migration_on_error = self.migration_on_error;
        spec.uid_map = self.uids;
        spec.gid_map = self.gids;
        spec.posix_acl = self.posix_acl;
        spec.readonly = self.readonly;
        spec.announce_submounts = !self.no_announce_submounts;
        spec.direct_io = self.direct_io;
        if let Some(queues) = self.queues {
            spec.queues = queues;
        }
        if let Some(mode) = self.mode {
            spec.mode = mode;
        }
        spec.cpus = self.cpus;
        check_cpus(&spec.cpus, spec.queues, spec.mode)
            .map_err(|e| format!("--{}: {}", e.key, e.reason))?;
        let user_namespace = user_namespace(self.namespace_uids, self.namespace_gids)?;
        Ok(VirtiofsdCommand::Serve(Box::new(VirtiofsdArgs {
            spec,
            seccomp: !self.seccomp_off,
            syslog: self.syslog,
            log_level: self.log_level.unwrap_or_else(|| "info".into()),
            rlimit_nofile: self.rlimit_nofile,
            notes: self.notes,
            join: self.join,
            user_namespace,
            sandbox: self.sandbox,
        })))
    }
}

/// The namespace `--uid-map` and `--gid-map` ask for, checked; a kind not given maps this
/// process's own ID to itself, as virtiofsd's default.
fn user_namespace(uids: Vec<IdRange>, gids: Vec<IdRange>) -> Result<Option<UserNamespace>, String> {
    if uids.is_empty() && gids.is_empty() {
        return Ok(None);
    }
    let own = |id| {
        vec![IdRange {
            inside: id,
            outside: id,
            count: 1,
        }]
    };
    // SAFETY: geteuid and getegid have no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let namespace = UserNamespace {
        uids: if uids.is_empty() { own(uid) } else { uids },
        gids: if gids.is_empty() { own(gid) } else { gids },
    };
    namespace.check()?;
    Ok(Some(namespace))
}

#[cfg(test)]
#[path = "virtiofsd_args_tests.rs"]
mod tests;
