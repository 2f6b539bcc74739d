//! Mirrors of running disks to NBD exports (`mirror-begin`, `mirror-end`): the destination's
//! socket is connected by the operator's `vbmq ctl` and passed, so a confined vbmq connects to
//! nothing; for the same reason a lost destination is never reconnected: the mirror fails.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Host, HostError, lock};
use crate::backend::{MirrorDisk, MirrorState};
use crate::nbd::client::{Client, Connector, TlsDialer};
use crate::virtio_blk::BlkDevice;

/// How long `mirror-begin` waits for the guest writes pushed before it to complete (they are
/// not sent to the destination, so the copy must read them).
const OLDER_WRITES: Duration = Duration::from_secs(60);

/// The export name and socket path of `nbd+unix:///NAME?socket=PATH` (an NBD URI, parsed as
/// the spec reads it: [`crate::nbd::uri`]) or of `unix:PATH` (the default export).
pub fn nbd_unix_uri(uri: &str) -> Result<(String, std::path::PathBuf), String> {
    if let Some(path) = uri.strip_prefix("unix:") {
        let path = std::path::PathBuf::from(path);
        if !path.is_absolute() {
            return Err(format!("{uri}: the socket path must be absolute"));
        }
        return Ok((String::new(), path));
    }
    let parsed: crate::nbd::uri::NbdUri = uri.parse().map_err(|e| format!("{uri}: {e}"))?;
    Ok((parsed.export, parsed.socket))
}

/// How long a destination may leave every request unanswered before the mirror fails, unless
/// `mirror-begin` says otherwise.
pub const MIRROR_TIMEOUT: Duration = Duration::from_secs(30);

/// How `mirror-begin` mirrors.
#[derive(Clone, Copy, Debug)]
pub struct MirrorOptions {
    /// Answer once the destination holds everything (or the mirror failed).
    pub wait_ready: bool,
    /// Copy only what the destination of the disk's failed mirror may miss.
    pub resume: bool,
    /// A destination silent this long fails the mirror.
    pub timeout: Duration,
}

impl Default for MirrorOptions {
    fn default() -> Self {
        MirrorOptions {
            wait_ready: false,
            resume: false,
            timeout: MIRROR_TIMEOUT,
        }
    }
}

/// The mirror error of `e`.
fn refused(e: impl std::fmt::Display) -> HostError {
    HostError::Mirror(e.to_string())
}

/// A connector that gives the passed stream once: a lost connection is not reopened.
fn passed_once(stream: UnixStream) -> Connector {
    let stream = Mutex::new(Some(stream));
    Box::new(move || {
        lock(&stream).take().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the destination's socket was passed once: no reconnection",
            )
        })
    })
}

impl Host {
    /// The mirror layer and the device of the disk on `socket`.
    fn mirror_and_device(
        &self,
        socket: &Path,
    ) -> Result<(Arc<MirrorDisk>, Arc<BlkDevice>), HostError> {
        let disks = lock(&self.disks);
        let running = disks
            .iter()
            .find(|r| r.spec.socket == socket)
            .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
        let mirror = running
            .handles
            .mirror()
            .ok_or_else(|| refused("this disk has no mirror layer"))?;
        Ok((mirror, running.device.clone()))
    }

    /// `mirror-begin`: mirrors the disk on `socket` to the NBD export (named `name`) at the
    /// other end of `stream`, as `options` say; with `wait_ready`, returns once the
    /// destination holds everything (or the mirror failed).
    pub fn mirror_begin(
        &self,
        socket: &Path,
        stream: UnixStream,
        name: &str,
        options: MirrorOptions,
    ) -> Result<MirrorState, HostError> {
        let (mirror, device) = self.mirror_and_device(socket)?;
        let client = Client::connect(passed_once(stream), name).map_err(refused)?;
        self.mirror_with(socket, mirror, &device, client, options)
    }

    /// `mirror-begin` to an export over TCP with TLS: as [`Host::mirror_begin`], the
    /// connection (passed once, as the Unix one) made by `dialer`.
    pub fn mirror_begin_tls(
        &self,
        socket: &Path,
        dialer: TlsDialer,
        name: &str,
        options: MirrorOptions,
    ) -> Result<MirrorState, HostError> {
        let (mirror, device) = self.mirror_and_device(socket)?;
        let client = Client::connect_tls(dialer, name).map_err(refused)?;
        self.mirror_with(socket, mirror, &device, client, options)
    }

    fn mirror_with(
        &self,
        socket: &Path,
        mirror: Arc<MirrorDisk>,
        device: &BlkDevice,
        client: Client,
        options: MirrorOptions,
    ) -> Result<MirrorState, HostError> {
        mirror
            .begin(Box::new(client), options.timeout, options.resume)
            .map_err(refused)?;
        // Writes pushed before the mirror began reach the disk only: the copy must come after.
        if !device.writes.wait_for_older(OLDER_WRITES) {
            mirror.stop();
            mirror.finish();
            return Err(refused("the guest's writes in flight did not complete"));
        }
        mirror.copy();
        crate::limited!(info, "{}: mirror begun", socket.display());
        let state = if options.wait_ready {
            mirror.wait_settled()
        } else {
            mirror.state()
        };
        state.ok_or_else(|| refused("the mirror ended at once"))
    }

    /// `mirror-end`: guest writes go to the disk alone from now on; once those in flight are
    /// done, the destination is flushed and disconnected. Returns the mirror's last state.
    pub fn mirror_end(&self, socket: &Path) -> Result<MirrorState, HostError> {
        let (mirror, device) = self.mirror_and_device(socket)?;
        let state = mirror
            .stop()
            .ok_or_else(|| refused("no mirror of this disk runs"))?;
        if !device.writes.wait_for_older(OLDER_WRITES) {
            crate::limited!(
                warn,
                "{}: mirror-end: guest writes still in flight",
                socket.display()
            );
        }
        mirror.finish();
        crate::limited!(info, "{}: mirror ended", socket.display());
        Ok(state)
    }
}
