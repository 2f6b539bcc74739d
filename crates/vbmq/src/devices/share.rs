//! A share from its spec: the virtio-fs device over its directory, and its bound socket.

use std::fs::File;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{FsSpec, FsSpecError, SpecError};
use crate::vhost_user::ShareServer;
use crate::virtio_fs::FsDevice;
use crate::worker::{QueueSettings, WaitMode};

fn bad(key: &str, reason: String) -> FsSpecError {
    FsSpecError(SpecError {
        key: key.into(),
        reason,
    })
}

/// Each queue's settings: the high-priority queue first, then the request queues. The first
/// carries only FORGET and INTERRUPT: it waits for kicks whatever the mode, beside the first
/// request queue.
fn queue_settings(spec: &FsSpec) -> Vec<QueueSettings> {
    (0..=spec.queues)
        .map(|i| QueueSettings {
            mode: if i == 0 { WaitMode::Event } else { spec.mode },
            poll: Duration::from_micros(spec.poll_us),
            cpu: spec.cpus.get(i.saturating_sub(1)).copied(),
            batch: true,
            max_size: spec.queue_size,
        })
        .collect()
}

/// Opens a share's directory and binds its socket, or takes the listening socket it was given
/// (before confinement).
pub(crate) fn build_share(spec: &FsSpec) -> Result<ShareServer, FsSpecError> {
    let queues = u32::try_from(spec.queues).unwrap_or(u32::MAX);
    let device = FsDevice::open_with(&spec.dir, &spec.tag, queues, &spec.features())
        .map_err(|e| bad("dir", e.to_string()))?
        .with_migration_on_error(spec.migration_on_error);
    if let Some(fd) = spec.listen_fd {
        let listener = inherited_listener(fd).map_err(|e| bad("fd", format!("{fd}: {e}")))?;
        return Ok(ShareServer::inherited(
            &spec.socket,
            listener,
            Arc::new(device),
            queue_settings(spec),
        ));
    }
    let (mode, group) = (spec.socket_mode, spec.socket_group);
    ShareServer::bind(
        &spec.socket,
        mode,
        group,
        Arc::new(device),
        queue_settings(spec),
    )
    .map_err(|e| bad("socket", e.to_string()))
}

/// What `vbmq ctl add-fs` opened for a share and passed: the directory, the socket it bound
/// and listens on, and the socket's lock file, which it holds (none: a socket the sender
/// inherited, as `vbmq virtiofsd --join --fd`; its file is the binder's).
pub struct PassedShare {
    /// The shared directory.
    pub dir: File,
    /// A detached mount of it (`open_tree(OPEN_TREE_CLONE)`), if the sender could make one:
    /// the share is then served from it, once checked to be one of `dir`.
    pub mount: Option<File>,
    /// The listening vhost-user socket.
    pub listener: UnixListener,
    /// The lock file beside the socket, if the sender bound it.
    pub lock: Option<File>,
}

/// Serves a share over what another process opened and bound (a confined vbmq, at run time).
pub(crate) fn build_passed_share(
    spec: &FsSpec,
    passed: PassedShare,
) -> Result<ShareServer, FsSpecError> {
    let queues = u32::try_from(spec.queues).unwrap_or(u32::MAX);
    let device =
        FsDevice::from_descriptor(passed.dir, &spec.dir, &spec.tag, queues, &spec.features())
            .map_err(|e| bad("dir", e.to_string()))?
            .with_migration_on_error(spec.migration_on_error);
    let (device, settings) = (Arc::new(device), queue_settings(spec));
    Ok(match passed.lock {
        Some(lock) => {
            ShareServer::from_listener(&spec.socket, passed.listener, lock, device, settings)
        }
        None => ShareServer::inherited(&spec.socket, passed.listener, device, settings),
    })
}

/// Takes descriptor `fd`, inherited from the process that started vbmq, if it is a listening
/// Unix socket (libvirt binds and listens on it before it starts the backend); it is closed on
/// exec from now on.
fn inherited_listener(fd: RawFd) -> std::io::Result<UnixListener> {
    let option = |name| {
        let mut value: libc::c_int = 0;
        let mut len = libc::socklen_t::try_from(size_of::<libc::c_int>()).unwrap_or(4);
        // SAFETY: getsockopt writes at most `len` bytes into `value`; a bad descriptor fails.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                name,
                (&raw mut value).cast(),
                &raw mut len,
            )
        };
        if rc == 0 {
            Ok(value)
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    let not_listening = || std::io::Error::other("not a listening Unix socket");
    let listening = |domain: std::io::Result<i32>, accepting: std::io::Result<i32>| {
        Ok::<_, std::io::Error>(domain? == libc::AF_UNIX && accepting? == 1)
    };
    match listening(option(libc::SO_DOMAIN), option(libc::SO_ACCEPTCONN)) {
        Ok(true) => {}
        Ok(false) => return Err(not_listening()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => return Err(not_listening()),
        Err(e) => return Err(e),
    }
    // SAFETY: F_SETFD on a descriptor just checked to be an open socket.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the descriptor is an open listening socket handed to this process, owned by the
    // returned listener alone from now on (a spec names it once).
    Ok(unsafe { UnixListener::from_raw_fd(fd) })
}
