//! Point-in-time NBD exports of running disks (`export-begin`, `export-end`): one per disk at
//! a time, served on the listening socket the operator's `vbmq ctl` bound and passed. An export
//! ends with `export-end`, with its disk's removal, or with the process (it is never restored).

use std::fs::File;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use super::{Host, HostError, lock};
use crate::devices::Handles;
use crate::nbd::NbdServer;

/// An export being served.
pub(super) struct RunningExport {
    /// The disk's socket.
    socket: PathBuf,
    /// Where it is served, as the operator named it (`unix:PATH`).
    address: String,
    /// The verbs of the disk's layers: its export ends there.
    handles: Handles,
    server: NbdServer,
}

impl RunningExport {
    /// Stops serving (every client disconnected), then ends the disk's export.
    fn end(self) {
        self.server.stop();
        self.handles.export_end();
    }
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
    /// `listener`, saving what the guest overwrites into `scratch`.
    pub fn export_begin(
        &self,
        socket: &Path,
        address: &str,
        listener: UnixListener,
        scratch: File,
    ) -> Result<ExportInfo, HostError> {
        let handles = {
            let disks = lock(&self.disks);
            let running = disks
                .iter()
                .find(|r| r.spec.socket == socket)
                .ok_or_else(|| HostError::NoSuchDisk(socket.to_path_buf()))?;
            running.handles.clone()
        };
        let mut exports = lock(&self.exports);
        if exports.iter().any(|e| e.address == address) {
            return Err(HostError::Export(format!("{address} is served already")));
        }
        let fleece = handles
            .export_begin(scratch)
            .map_err(|e| HostError::Export(e.to_string()))?;
        let info = ExportInfo {
            bytes: crate::nbd::Export::size(fleece.as_ref()),
            block_size: crate::nbd::Export::block_size(fleece.as_ref()),
        };
        let name = format!("{} export {address}", socket.display());
        let server = match NbdServer::start(listener, fleece, name) {
            Ok(server) => server,
            Err(e) => {
                handles.export_end();
                return Err(HostError::Export(e.to_string()));
            }
        };
        exports.push(RunningExport {
            socket: socket.to_path_buf(),
            address: address.to_owned(),
            handles,
            server,
        });
        crate::limited!(
            info,
            "{}: export of {} bytes begun on {address}",
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
