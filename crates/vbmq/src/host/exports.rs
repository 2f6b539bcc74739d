//! NBD exports of disks (`export-begin`, `export-end`), served on the listening socket the
//! operator's `vbmq ctl` bound and passed: point-in-time read-only exports of running disks
//! (one per disk at a time), and writable exports of disks no guest has started on yet (a
//! mirror's destination), which end when a guest's first ring starts. An export ends with
//! `export-end`, with its disk's removal, or with the process (it is never restored).
//!
//! Checkpoints (`track-changes=on` disks): `--checkpoint NEW` begins the map NEW, then the
//! writes pushed before it complete, then the export's instant: every write is in the export
//! or in NEW, so the next incremental backup from NEW misses none. `--bitmaps A` freezes the
//! map A once the writes pushed before the instant have completed (and so are marked): it holds
//! every block written between A and the instant, and at most a few written just after it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Host, HostError, SHRINK_WAIT, lock};
use crate::backend::{ChangeMap, WritableExport};
use crate::devices::Handles;
use crate::nbd::{DirtyBitmap, Export, NbdListener, NbdServer, WithBitmaps};
use crate::virtio_blk::BlkDevice;

/// An export's server, taken by whichever ends it first: `export-end`, or a guest starting on
/// a writable export's disk.
type ServerSlot = Arc<Mutex<Option<NbdServer>>>;

/// An export being served.
pub(super) struct RunningExport {
    /// The disk's socket.
    socket: PathBuf,
    /// Where it is served, as the operator named it (`unix:PATH`, `tcp:HOST:PORT`).
    address: String,
    /// The verbs of the disk's layers: its export ends there.
    handles: Handles,
    server: ServerSlot,
    /// A writable export's disk device, whose guest gate ends it.
    writable: Option<Arc<BlkDevice>>,
}

impl RunningExport {
    /// Stops serving (every client disconnected), then ends the disk's export.
    fn end(self) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            server.stop();
        }
        match self.writable {
            Some(device) => device.guest_gate.clear(),
            None => self.handles.export_end(),
        }
    }
}

/// The checkpoints of an export: the maps it serves, the one it begins.
#[derive(Clone, Debug, Default)]
pub struct ExportCheckpoints {
    /// A `qemu:dirty-bitmap:NAME` context for each (`--bitmaps`).
    pub bitmaps: Vec<String>,
    /// Begun at the export's instant (`--checkpoint`).
    pub begin: Option<String>,
}

/// What `export-begin` reports.
#[derive(Clone, Debug)]
pub struct ExportInfo {
    /// Bytes of the export.
    pub bytes: u64,
    /// The unit of saving and of `NBD_CMD_TRIM`.
    pub block_size: u32,
}

impl Host {
    /// `export-begin`: serves the disk on `socket` as it is now, read-only, to NBD clients of
    /// `listener`, saving what the guest overwrites into `scratch`, with `checkpoints`.
    pub fn export_begin(
        &self,
        socket: &Path,
        address: &str,
        listener: impl Into<NbdListener>,
        scratch: File,
        checkpoints: &ExportCheckpoints,
    ) -> Result<ExportInfo, HostError> {
        let (handles, device) = self.handles_and_device(socket)?;
        let map = match (checkpoints.bitmaps.is_empty(), &checkpoints.begin) {
            (true, None) => None,
            _ => Some(
                handles
                    .changes()
                    .ok_or_else(|| HostError::NotTracked(socket.to_path_buf()))?,
            ),
        };
        let mut exports = lock(&self.exports);
        if exports.iter().any(|e| e.address == address) {
            return Err(HostError::Export(format!("{address} is served already")));
        }
        if let Some(map) = &map {
            // Refused before anything begins: a map unknown, invalid, or named twice.
            for (i, name) in checkpoints.bitmaps.iter().enumerate() {
                if checkpoints.bitmaps[..i].contains(name) {
                    return Err(HostError::Export(format!("--bitmaps names {name} twice")));
                }
                map.changed_since(name)?;
            }
        }
        let wait_for_older = || {
            device
                .writes
                .wait_for_older(SHRINK_WAIT)
                .then_some(())
                .ok_or_else(|| {
                    HostError::Export(
                        "the writes in flight at the export's instant did not complete within 10 s"
                            .into(),
                    )
                })
        };
        let begun = match (&map, &checkpoints.begin) {
            (Some(map), Some(name)) => {
                map.begin(name)?;
                Some((map, name))
            }
            _ => None,
        };
        let forget_begun = || {
            if let Some((map, name)) = begun {
                let _ = map.forget(name);
            }
        };
        if begun.is_some()
            && let Err(e) = wait_for_older()
        {
            forget_begun();
            return Err(e);
        }
        let fleece = handles.export_begin(scratch).map_err(|e| {
            forget_begun();
            HostError::Export(e.to_string())
        })?;
        // The storage's contents as the guest sees them (decrypted).
        let view = handles.export_view(fleece);
        let export: Arc<dyn Export> = match &map {
            Some(map) if !checkpoints.bitmaps.is_empty() => {
                match wait_for_older().and_then(|()| frozen(map, &checkpoints.bitmaps)) {
                    Ok(bitmaps) => Arc::new(WithBitmaps::new(view, bitmaps)),
                    Err(e) => {
                        handles.export_end();
                        forget_begun();
                        return Err(e);
                    }
                }
            }
            _ => view,
        };
        let info = ExportInfo {
            bytes: export.size(),
            block_size: export.block_size(),
        };
        let name = format!("{} export {address}", socket.display());
        let server = match NbdServer::start(listener, export, name) {
            Ok(server) => server,
            Err(e) => {
                handles.export_end();
                forget_begun();
                return Err(HostError::Export(e.to_string()));
            }
        };
        exports.push(RunningExport {
            socket: socket.to_path_buf(),
            address: address.to_owned(),
            handles,
            server: Arc::new(Mutex::new(Some(server))),
            writable: None,
        });
        crate::limited!(
            info,
            "{}: export of {} bytes begun on {address}",
            socket.display(),
            info.bytes
        );
        Ok(info)
    }

    /// `export-begin --writable`: serves the disk on `socket`, which no guest has started on,
    /// to NBD clients of `listener` for reading and writing, at the level a mirror sends from
    /// (under the cipher of an `encrypt=` disk: what arrives is stored as it comes).
    /// The first ring a guest starts ends the export (every client disconnected, every write
    /// done) before the guest's first request.
    pub fn export_begin_writable(
        &self,
        socket: &Path,
        address: &str,
        listener: impl Into<NbdListener>,
    ) -> Result<ExportInfo, HostError> {
        let (disk, handles, device) = {
            let disks = lock(&self.disks);
            let running = disks
                .iter()
                .find(|r| r.spec.socket == socket)
                .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
            if running.device.readonly {
                return Err(HostError::Export("the disk is read-only".into()));
            }
            if running.spec.key_file.is_some() && running.spec.cache_preload {
                return Err(HostError::Export(
                    "an encrypt= disk with cache-preload=on: the export writes ciphertext under \
                     the cache, which it would leave stale"
                        .into(),
                ));
            }
            // At the level a mirror sends from: an encrypt= disk receives ciphertext.
            let written: Arc<dyn crate::backend::Disk> = match running.handles.mirror() {
                Some(mirror) => mirror,
                None => Arc::clone(&running.disk),
            };
            (
                written,
                running.handles.clone(),
                Arc::clone(&running.device),
            )
        };
        let mut exports = lock(&self.exports);
        if exports.iter().any(|e| e.address == address) {
            return Err(HostError::Export(format!("{address} is served already")));
        }
        let export = Arc::new(
            WritableExport::new(disk.clone()).map_err(|e| HostError::Export(e.to_string()))?,
        );
        let slot: ServerSlot = Arc::default();
        let (ended, taken, name) = (export.clone(), slot.clone(), socket.display().to_string());
        let gated = device.guest_gate.before_start(Box::new(move || {
            ended.end();
            let server = lock(&taken).take();
            if let Some(server) = server {
                server.stop();
                crate::limited!(info, "{name}: a guest starts: its writable export ended");
            }
        }));
        if !gated {
            return Err(HostError::Export(
                "a guest has started on this disk (or another writable export waits for one): \
                 only a disk no guest runs on is exported writable"
                    .into(),
            ));
        }
        let info = ExportInfo {
            bytes: crate::nbd::Export::size(export.as_ref()),
            block_size: crate::nbd::Export::block_size(export.as_ref()),
        };
        {
            // Held while starting: a guest starting now ends the export once it is served.
            let mut served = lock(&slot);
            if device.guest_gate.has_started() {
                device.guest_gate.clear();
                return Err(HostError::Export("a guest has started on this disk".into()));
            }
            let name = format!("{} writable export {address}", socket.display());
            match NbdServer::start(listener, export, name) {
                Ok(server) => *served = Some(server),
                Err(e) => {
                    device.guest_gate.clear();
                    return Err(HostError::Export(e.to_string()));
                }
            }
        }
        exports.push(RunningExport {
            socket: socket.to_path_buf(),
            address: address.to_owned(),
            handles,
            server: slot,
            writable: Some(device),
        });
        crate::limited!(
            info,
            "{}: writable export of {} bytes begun on {address}",
            socket.display(),
            info.bytes
        );
        Ok(info)
    }

    /// `export-end`: disconnects the export's clients and discards its scratch.
    pub fn export_end(&self, socket: &Path, address: &str) -> Result<(), HostError> {
        let export = {
            let mut exports = lock(&self.exports);
            let index = exports
                .iter()
                .position(|e| e.socket == socket && e.address == address)
                .ok_or_else(|| {
                    HostError::Export(format!("no export of {} on {address}", socket.display()))
                })?;
            exports.remove(index)
        };
        export.end();
        crate::limited!(info, "{}: export on {address} ended", socket.display());
        Ok(())
    }

    /// Ends the exports of the disk on `socket` (it is being removed).
    pub(super) fn end_exports_of(&self, socket: &Path) {
        let ended: Vec<RunningExport> = {
            let mut exports = lock(&self.exports);
            let (ended, kept) = std::mem::take(&mut *exports)
                .into_iter()
                .partition(|e| e.socket == socket);
            *exports = kept;
            ended
        };
        for export in ended {
            export.end();
        }
    }
}

/// The maps `names` as they are now, each a dirty bitmap.
fn frozen(map: &ChangeMap, names: &[String]) -> Result<Vec<DirtyBitmap>, HostError> {
    names
        .iter()
        .map(|name| {
            let changes = map.changed_since(name)?;
            Ok(DirtyBitmap::new(name, changes.extents))
        })
        .collect()
}
