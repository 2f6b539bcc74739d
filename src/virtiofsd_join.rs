//! `vbmq virtiofsd --join CTL`: the share virtiofsd's command line describes, added to a
//! running `vbmq serve --control CTL` (`add-fs`, with the directory and the listening socket
//! passed as `vbmq ctl add-fs` passes them) instead of served here. The process stays, as a
//! management stack that tracks its pid expects, and removes the share on SIGTERM or SIGINT.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use vbmq::config::{FsSpec, VirtiofsdArgs};
use vbmq::virtio_fs::{FsCache, OnError};
use vbmq::worker::WaitMode;

use crate::control::Request;
use crate::control::protocol::{Answer, DeviceEntry};

/// The tag `--fs` requires when virtiofsd's command line gives none (QEMU keeps its own; an
/// `--fs` share does not offer one through vhost-user's CONFIG).
const DEFAULT_TAG: &str = "virtiofs";

/// How often the daemon is asked whether it still serves the share.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// Adds the share to the vbmq at `control`, prints `ready_line`, and waits; returns the exit
/// status (0 after SIGTERM or SIGINT, 1 when the add is refused or the share disappears).
pub fn run(args: &VirtiofsdArgs, control: &Path, ready_line: &str) -> i32 {
    match join(args, control, ready_line) {
        Ok(status) => status,
        Err(e) => {
            eprintln!("vbmq virtiofsd: {e}");
            1
        }
    }
}

fn join(args: &VirtiofsdArgs, control: &Path, ready_line: &str) -> Result<i32, String> {
    // Blocked before any thread starts, so that only `sigtimedwait` below takes them.
    let signals = block_stop_signals()?;
    if args.user_namespace.is_some() {
        return Err(
            "--uid-map, --gid-map: not with --join (a share of vbmq serve is served \
                    in vbmq serve's own namespace)"
                .into(),
        );
    }
    let spec = &args.spec;
    let dir = std::path::absolute(&spec.dir).map_err(|e| format!("--shared-dir: {e}"))?;
    let inherited = spec.listen_fd.map(inherited_socket).transpose()?;
    let socket = match &inherited {
        Some((_, path)) => path.clone(),
        None => std::path::absolute(&spec.socket).map_err(|e| format!("--socket-path: {e}"))?,
    };
    let text = spec_text(spec, &socket, &dir)?;
    let bound = inherited.is_none();
    match inherited {
        Some((listener, _)) => {
            let (dir, mount) = crate::ctl_fs::open_dir(&dir)?;
            let request = Request::AddFs {
                spec: text.clone(),
                mount: mount.is_some(),
            };
            let fds = std::iter::once(dir.as_fd())
                .chain(mount.as_ref().map(AsFd::as_fd))
                .chain([listener.as_fd()]);
            ask(control, &request, &fds.collect::<Vec<_>>())?;
        }
        None => {
            let opened = crate::ctl_fs::open_share(&text)?;
            let request = Request::AddFs {
                spec: text.clone(),
                mount: opened.has_mount(),
            };
            if let Err(e) = ask(control, &request, &opened.fds()) {
                opened.discard();
                return Err(e);
            }
        }
    }
    eprintln!("{ready_line}");
    tracing::info!(
        "{}: served by the vbmq at {}",
        socket.display(),
        control.display()
    );
    loop {
        if let Some(signal) = wait_signal(&signals, CHECK_EVERY) {
            tracing::info!("signal {signal}: removing the share");
            let remove = Request::RemoveFs {
                socket: socket.display().to_string(),
            };
            if let Err(e) = ask(control, &remove, &[]) {
                eprintln!("vbmq virtiofsd: remove-fs: {e}");
            }
            if bound {
                crate::ctl_fs::remove_files(&socket);
            }
            return Ok(0);
        }
        if !served(control, &socket) {
            return Err(format!(
                "{}: no longer served by the vbmq at {} (restarted, or the share removed)",
                socket.display(),
                control.display()
            ));
        }
    }
}

/// Sends `request` with `fds`; the daemon's refusal (or why it cannot be reached) is one line.
fn ask(
    control: &Path,
    request: &Request,
    fds: &[BorrowedFd<'_>],
) -> Result<Option<Answer>, String> {
    let reply = crate::ctl::exchange(control, request, fds)
        .map_err(|e| format!("{}: {e}", control.display()))?;
    if reply.ok {
        Ok(reply.result)
    } else {
        Err(reply.error.unwrap_or_else(|| "refused".into()))
    }
}

/// Whether the vbmq at `control` lists a share on `socket`.
fn served(control: &Path, socket: &Path) -> bool {
    let name = socket.display().to_string();
    match ask(control, &Request::List, &[]) {
        Ok(Some(Answer::Devices(devices))) => devices
            .iter()
            .any(|d| matches!(d, DeviceEntry::Fs(share) if share.socket == name)),
        _ => false,
    }
}

/// The `--fs` value for `spec`, served on `socket` from `dir`; what `--fs` cannot say is
/// refused with one line.
fn spec_text(spec: &FsSpec, socket: &Path, dir: &Path) -> Result<String, String> {
    if spec.xattrmap.is_some() {
        return Err(
            "--xattrmap: not with --join (a share of vbmq serve maps no xattr names)".into(),
        );
    }
    if !spec.uid_map.is_empty() || !spec.gid_map.is_empty() {
        return Err("--translate-uid, --translate-gid: not with --join \
                    (a share of vbmq serve translates no IDs)"
            .into());
    }
    let on = |b: bool| if b { "on" } else { "off" };
    let tag = if spec.tag.is_empty() {
        DEFAULT_TAG
    } else {
        &spec.tag
    };
    let mut pairs = vec![
        format!("socket={}", socket.display()),
        format!("dir={}", dir.display()),
        format!("tag={tag}"),
        format!("queues={}", spec.queues),
        format!("queue-size={}", spec.queue_size),
        format!("mode={}", mode_name(spec.mode)),
        format!("poll-us={}", spec.poll_us),
        format!("readonly={}", on(spec.readonly)),
        format!("socket-mode={:o}", spec.socket_mode),
        format!("cache={}", cache_name(spec.cache)),
        format!("xattr={}", on(spec.xattr)),
        format!("posix-acl={}", on(spec.posix_acl)),
        format!("announce-submounts={}", on(spec.announce_submounts)),
        format!("direct-io={}", on(spec.direct_io)),
        format!(
            "migration-on-error={}",
            on_error_name(spec.migration_on_error)
        ),
    ];
    if let Some(group) = spec.socket_group {
        pairs.push(format!("socket-group={group}"));
    }
    if !spec.cpus.is_empty() {
        let cpus: Vec<String> = spec.cpus.iter().map(ToString::to_string).collect();
        pairs.push(format!("cpus={}", cpus.join(",")));
    }
    let text = pairs.join(",");
    let mut expected = spec.clone();
    expected.socket = socket.to_path_buf();
    expected.dir = dir.to_path_buf();
    expected.tag = tag.to_string();
    expected.listen_fd = None;
    expected.offer_config = false;
    match FsSpec::parse(&text, &vbmq::worker::online_cpus()) {
        Ok(parsed) if parsed == expected => Ok(text),
        _ => Err(format!(
            "--join: the share cannot be written as an --fs value (a comma or = in a path \
             or the tag?): {text}"
        )),
    }
}

fn mode_name(mode: WaitMode) -> &'static str {
    match mode {
        WaitMode::Event => "event",
        WaitMode::Poll => "poll",
        WaitMode::Adaptive => "adaptive",
    }
}

fn cache_name(cache: FsCache) -> &'static str {
    match cache {
        FsCache::Never => "never",
        FsCache::Metadata => "metadata",
        FsCache::Auto => "auto",
        FsCache::Always => "always",
    }
}

fn on_error_name(on_error: OnError) -> &'static str {
    match on_error {
        OnError::Abort => "abort",
        OnError::GuestError => "guest-error",
    }
}

/// Takes inherited descriptor `fd` (`--fd`), a socket bound at a path (the share's name in
/// the daemon); the daemon checks that it listens.
fn inherited_socket(fd: i32) -> Result<(OwnedFd, PathBuf), String> {
    let bad = |why: String| format!("--fd {fd}: {why}");
    // SAFETY: F_GETFD only asks whether the descriptor is open.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(bad("not an open descriptor".into()));
    }
    // SAFETY: an open descriptor handed to this process; owned here alone from now on.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD on the open descriptor: not passed on to anything this process starts.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let mut address = MaybeUninit::<libc::sockaddr_un>::zeroed();
    let mut len = libc::socklen_t::try_from(size_of::<libc::sockaddr_un>()).unwrap_or(0);
    // SAFETY: getsockname writes at most `len` bytes into `address`.
    if unsafe { libc::getsockname(fd, address.as_mut_ptr().cast(), &raw mut len) } != 0 {
        return Err(bad(std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: zeroed, then filled by getsockname: every byte is initialized.
    let address = unsafe { address.assume_init() };
    if address.sun_family != libc::AF_UNIX as libc::sa_family_t {
        return Err(bad("not a Unix socket".into()));
    }
    let bytes: Vec<u8> = address
        .sun_path
        .iter()
        .map(|&c| c.cast_unsigned())
        .take_while(|&b| b != 0)
        .collect();
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(&bytes));
    if !path.is_absolute() {
        return Err(bad(
            "the socket has no absolute path, which the daemon names the share by".into(),
        ));
    }
    Ok((owned, path))
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts); returns the set.
fn block_stop_signals() -> Result<libc::sigset_t, String> {
    let mut set = MaybeUninit::<libc::sigset_t>::zeroed();
    // SAFETY: sigemptyset initializes the set; sigaddset and pthread_sigmask read it.
    unsafe {
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigaddset(set.as_mut_ptr(), libc::SIGTERM);
        libc::sigaddset(set.as_mut_ptr(), libc::SIGINT);
        let set = set.assume_init();
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(format!(
                "cannot block SIGTERM: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        Ok(set)
    }
}

/// A signal of `set` taken within `timeout`.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let time = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(1),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos()),
    };
    // SAFETY: sigtimedwait reads the set and the timeout; no siginfo is asked for.
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &time) };
    (signal > 0).then_some(signal)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vbmq::config::{VirtiofsdCommand, parse_virtiofsd_args};

    fn given_spec(line: &str) -> FsSpec {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        match parse_virtiofsd_args(&args, &vbmq::worker::online_cpus()) {
            Ok(VirtiofsdCommand::Serve(args)) => args.spec,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn what_the_command_line_says_is_said_in_fs_syntax() {
        let given = given_spec(
            "--fd=3 --shared-dir /d --tag data --cache never --readonly --posix-acl \
             --allow-direct-io --no-announce-submounts --queues 1 --mode poll \
             --cpus 0 --migration-on-error guest-error",
        );
        let text = spec_text(&given, Path::new("/run/s.sock"), Path::new("/d")).unwrap();
        let parsed = FsSpec::parse(&text, &vbmq::worker::online_cpus()).unwrap();
        assert_eq!(parsed.socket, Path::new("/run/s.sock"));
        assert_eq!(
            (parsed.tag.as_str(), parsed.cache),
            ("data", FsCache::Never)
        );
        assert!(parsed.readonly && parsed.posix_acl && parsed.xattr && parsed.direct_io);
        assert!(!parsed.announce_submounts);
        assert_eq!(
            (parsed.mode, parsed.cpus.as_slice()),
            (WaitMode::Poll, &[0][..])
        );
        assert_eq!(parsed.migration_on_error, OnError::GuestError);
        let plain = given_spec("--socket-path /s --shared-dir /d");
        let text = spec_text(&plain, Path::new("/s"), Path::new("/d")).unwrap();
        assert!(text.contains(&format!("tag={DEFAULT_TAG}")), "{text}");
    }

    #[test]
    fn what_fs_cannot_say_is_refused() {
        let refused = |line: &str, socket: &str, dir: &str| {
            spec_text(&given_spec(line), Path::new(socket), Path::new(dir)).unwrap_err()
        };
        let e = refused(
            "--socket-path /s --shared-dir /d --xattrmap=:prefix:all:trusted.:user.vm.:",
            "/s",
            "/d",
        );
        assert!(e.starts_with("--xattrmap"), "{e}");
        let e = refused(
            "--socket-path /s --shared-dir /d --translate-uid=map:0:0:1",
            "/s",
            "/d",
        );
        assert!(e.contains("not with --join"), "{e}");
        let e = refused("--socket-path /s --shared-dir /d", "/s", "/d,tag=evil");
        assert!(e.contains("cannot be written as an --fs value"), "{e}");
    }
}
