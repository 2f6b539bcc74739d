//! The daemon's side of the protocol: a [`Request`] done on the [`Host`], its [`Reply`].

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::path::Path;

use vbmq::host::{DeviceInfo, DeviceKind, DiskCounters, DiskInfo, Host, PassedShare, ShareInfo};
use vbmq::nbd::uri::AnyUri;
use vbmq::passed_fds::PassedDisk;

use super::protocol::{
    Answer, ChangedBlocks, CheckpointEntry, DeviceEntry, DiskEntry, DiskStats, ExportEntry, Extent,
    Kind, Latency, MirrorEntry, Passed, QueueStats, Reply, Request, ShareEntry, Size,
    SnapshotEntry,
};

/// Answers one request line; `fds` are the descriptors sent with it, by a client running as
/// `client_uid`.
pub fn answer(host: &Host, line: &[u8], fds: Vec<OwnedFd>, client_uid: u32) -> Reply {
    match Request::parse(line).and_then(|request| dispatch(host, request, fds, client_uid)) {
        Ok(answer) => Reply::done(answer),
        Err(error) => Reply::refused(error),
    }
}

fn dispatch(
    host: &Host,
    request: Request,
    fds: Vec<OwnedFd>,
    client_uid: u32,
) -> Result<Answer, String> {
    let refused = |e: vbmq::host::HostError| e.to_string();
    if let Request::AddDisk { spec, fds: names } = request {
        let mut passed = passed_disk(&names, fds)?;
        passed.client_uid = Some(client_uid);
        return host
            .add_disk_passed(&spec, passed)
            .map(disk)
            .map_err(refused);
    }
    if let Request::Snapshot { socket, name } = request {
        return snapshot(host, &socket, name, fds);
    }
    if let Request::ExportBegin {
        socket,
        address,
        tls_verify_peer,
        bitmaps,
        checkpoint,
    } = request
    {
        let checkpoints = vbmq::host::ExportCheckpoints {
            bitmaps,
            begin: checkpoint,
        };
        return export_begin(host, &socket, &address, tls_verify_peer, &checkpoints, fds);
    }
    if let Request::ExportBeginWritable {
        socket,
        address,
        tls_verify_peer,
    } = request
    {
        return export_begin_writable(host, &socket, &address, tls_verify_peer, fds);
    }
    if let Request::MirrorBegin {
        socket,
        destination,
        wait_ready,
        resume,
        timeout_secs,
    } = request
    {
        let mut options = vbmq::host::MirrorOptions {
            wait_ready,
            resume,
            ..Default::default()
        };
        if let Some(secs) = timeout_secs {
            options.timeout = std::time::Duration::from_secs(secs);
        }
        return mirror_begin(host, &socket, &destination, options, fds);
    }
    if !fds.is_empty() && !matches!(request, Request::AddFs { .. }) {
        return Err("only add-disk, add-fs, snapshot and export-begin take descriptors".into());
    }
    match request {
        Request::AddDisk { .. }
        | Request::Snapshot { .. }
        | Request::ExportBegin { .. }
        | Request::ExportBeginWritable { .. }
        | Request::MirrorBegin { .. } => Err("answered above: a defect".into()),
        Request::MirrorEnd { socket } => host
            .mirror_end(Path::new(&socket))
            .map(|state| Answer::Mirror(mirror_entry(&state)))
            .map_err(refused),
        Request::ExportEnd { socket, address } => host
            .export_end(Path::new(&socket), &address)
            .map(|()| Answer::Nothing)
            .map_err(refused),
        Request::RemoveDisk { socket } => host
            .remove_disk(Path::new(&socket))
            .map(|()| Answer::Nothing)
            .map_err(refused),
        Request::AddFs { spec, mount } => {
            let passed = passed_share(fds, mount)?;
            host.add_passed_share(&spec, passed)
                .map(|info| Answer::Share(share_entry(&info)))
                .map_err(refused)
        }
        Request::RemoveFs { socket } => host
            .remove_share(Path::new(&socket))
            .map(|()| Answer::Nothing)
            .map_err(refused),
        Request::Resize {
            socket,
            size,
            force,
        } => {
            let size = match size {
                Some(Size::Bytes(bytes)) => Some(bytes),
                Some(Size::Text(text)) => vbmq::config::parse_size(&text),
                None => None,
            }
            .ok_or("resize: \"size\" must be bytes or a size such as 40G")?;
            host.resize(Path::new(&socket), size, force)
                .map(disk)
                .map_err(refused)
        }
        Request::SetLimits { socket, limits } => {
            let limits = vbmq::config::parse_limits(&limits).map_err(|e| e.to_string())?;
            host.set_limits(Path::new(&socket), limits)
                .map(disk)
                .map_err(refused)
        }
        Request::Checkpoint { socket, name } => host
            .checkpoint(Path::new(&socket), &name)
            .map(|()| Answer::Nothing)
            .map_err(refused),
        Request::ChangedBlocks { socket, since } => host
            .changed_blocks(Path::new(&socket), &since)
            .map(|changes| {
                Answer::Changes(ChangedBlocks {
                    name: changes.name,
                    block_size: changes.block_size,
                    capacity: changes.capacity,
                    extents: changes
                        .extents
                        .iter()
                        .map(|&(offset, length)| Extent { offset, length })
                        .collect(),
                })
            })
            .map_err(refused),
        Request::ForgetCheckpoint { socket, name } => host
            .forget_checkpoint(Path::new(&socket), &name)
            .map(|()| Answer::Nothing)
            .map_err(refused),
        Request::Reload { replace } => host.reload(replace).map(Answer::Notes).map_err(refused),
        Request::List => Ok(Answer::Devices(
            host.devices().iter().map(device_entry).collect(),
        )),
        Request::Stats { socket } => host
            .stats(socket.as_deref().map(Path::new))
            .map(|disks| Answer::Stats(disks.iter().map(stats).collect()))
            .map_err(refused),
    }
}

/// `snapshot`: into the one file passed, which the disk checks (a regular file, writable).
fn snapshot(
    host: &Host,
    socket: &str,
    name: Option<String>,
    fds: Vec<OwnedFd>,
) -> Result<Answer, String> {
    let mut fds = fds.into_iter();
    let (Some(file), None) = (fds.next(), fds.next()) else {
        return Err(
            "snapshot: send the snapshot file, open for writing, as the one descriptor with \
             the request (vbmq ctl snapshot does)"
                .into(),
        );
    };
    let report = host
        .snapshot(Path::new(socket), File::from(file), name.as_deref())
        .map_err(|e| e.to_string())?;
    Ok(Answer::Snapshot(SnapshotEntry {
        method: report.method.name().into(),
        bytes: report.bytes,
        duration_ms: u64::try_from(report.duration.as_millis()).unwrap_or(u64::MAX),
        copied_before_write: report.copied_before_write,
    }))
}

/// `export-begin`: the listening socket and the scratch file passed, in that order (then a TCP
/// export's credentials).
fn export_begin(
    host: &Host,
    socket: &str,
    address: &str,
    verify_peer: bool,
    checkpoints: &vbmq::host::ExportCheckpoints,
    fds: Vec<OwnedFd>,
) -> Result<Answer, String> {
    let mut fds = fds.into_iter();
    let (Some(listener), Some(scratch)) = (fds.next(), fds.next()) else {
        return Err(
            "export-begin: send the export's listening socket and its scratch file (open for \
             reading and writing) as 2 descriptors with the request (vbmq ctl export-begin does)"
                .into(),
        );
    };
    let listener = super::passed_tls::listener(address, listener, fds, verify_peer)
        .map_err(|e| format!("export-begin: {e}"))?;
    let info = host
        .export_begin(
            Path::new(socket),
            address,
            listener,
            File::from(scratch),
            checkpoints,
        )
        .map_err(|e| e.to_string())?;
    Ok(Answer::Export(ExportEntry {
        address: address.to_owned(),
        bytes: info.bytes,
        block_size: info.block_size,
    }))
}

/// `export-begin --writable`: the listening socket passed.
fn export_begin_writable(
    host: &Host,
    socket: &str,
    address: &str,
    verify_peer: bool,
    fds: Vec<OwnedFd>,
) -> Result<Answer, String> {
    let mut fds = fds.into_iter();
    let Some(listener) = fds.next() else {
        return Err(
            "export-begin --writable: send the export's listening socket as 1 descriptor with \
             the request (vbmq ctl export-begin --writable does)"
                .into(),
        );
    };
    let listener = super::passed_tls::listener(address, listener, fds, verify_peer)
        .map_err(|e| format!("export-begin: {e}"))?;
    let info = host
        .export_begin_writable(Path::new(socket), address, listener)
        .map_err(|e| e.to_string())?;
    Ok(Answer::Export(ExportEntry {
        address: address.to_owned(),
        bytes: info.bytes,
        block_size: info.block_size,
    }))
}

/// `mirror-begin`: the destination's connected socket passed.
fn mirror_begin(
    host: &Host,
    socket: &str,
    destination: &str,
    options: vbmq::host::MirrorOptions,
    fds: Vec<OwnedFd>,
) -> Result<Answer, String> {
    if let Ok(AnyUri::Tls(uri)) = destination.parse::<AnyUri>() {
        let dialer =
            super::passed_tls::dialer(&uri, fds).map_err(|e| format!("mirror-begin: {e}"))?;
        return host
            .mirror_begin_tls(Path::new(socket), dialer, &uri.export, options)
            .map(|state| Answer::Mirror(mirror_entry(&state)))
            .map_err(|e| e.to_string());
    }
    let mut fds = fds.into_iter();
    let (Some(stream), None) = (fds.next(), fds.next()) else {
        return Err(
            "mirror-begin: send the destination's connected socket as 1 descriptor with the \
             request (vbmq ctl mirror-begin does)"
                .into(),
        );
    };
    let (name, _) = vbmq::host::nbd_unix_uri(destination)?;
    let stream = vbmq::passed_fds::connected_unix_socket(stream)
        .map_err(|e| format!("mirror-begin: the descriptor: {e}"))?;
    host.mirror_begin(Path::new(socket), stream, &name, options)
        .map(|state| Answer::Mirror(mirror_entry(&state)))
        .map_err(|e| e.to_string())
}

/// A mirror's state as the protocol gives it.
fn mirror_entry(state: &vbmq::backend::MirrorState) -> MirrorEntry {
    use vbmq::backend::MirrorState;
    let (name, copied, total, reason) = match state {
        MirrorState::Copying { copied, total } => ("copying", *copied, *total, None),
        MirrorState::Ready { total } => ("ready", *total, *total, None),
        MirrorState::Failed(why) => ("failed", 0, 0, Some(why.clone())),
    };
    MirrorEntry {
        state: name.into(),
        copied,
        total,
        reason,
    }
}

/// `add-fs`'s descriptors, in order: the directory, its detached mount (if `mount`), the
/// listening socket, its lock file (no lock file: a socket the sender inherited, whose file is
/// the binder's).
fn passed_share(fds: Vec<OwnedFd>, mount: bool) -> Result<PassedShare, String> {
    let mut fds = fds.into_iter();
    let dir = fds.next();
    let mount = if mount {
        fds.next().map(Some)
    } else {
        Some(None)
    };
    let (Some(dir), Some(mount), Some(listener), lock, None) =
        (dir, mount, fds.next(), fds.next(), fds.next())
    else {
        return Err(
            "add-fs: send the share's directory, its listening socket and the \
                    socket's lock file (none for an inherited socket) as 2 or 3 descriptors \
                    with the request, the directory's mount after it if \"mount\" says so \
                    (vbmq ctl add-fs does)"
                .into(),
        );
    };
    Ok(PassedShare {
        dir: dir.into(),
        mount: mount.map(Into::into),
        listener: UnixListener::from(listener),
        lock: lock.map(Into::into),
    })
}

/// The descriptors of an `add-disk`, by the names the request gives them in order.
fn passed_disk(names: &[Passed], fds: Vec<OwnedFd>) -> Result<PassedDisk, String> {
    if names.len() != fds.len() {
        return Err(format!(
            "add-disk: {} descriptor(s) named, {} passed",
            names.len(),
            fds.len()
        ));
    }
    let mut passed = PassedDisk::default();
    for (name, fd) in names.iter().zip(fds) {
        if *name == Passed::Backing {
            passed.backing.push(fd);
            continue;
        }
        let slot = match name {
            Passed::Socket => &mut passed.socket,
            Passed::Image => &mut passed.image,
            Passed::ImageDirect => &mut passed.image_direct,
            Passed::Base => &mut passed.base,
            Passed::BaseDirect => &mut passed.base_direct,
            Passed::Map => &mut passed.map,
            Passed::Key => &mut passed.key,
            Passed::Changes => &mut passed.changes,
            Passed::Backing => return Err("add-disk: a backing file out of place: a defect".into()),
        };
        if slot.replace(fd).is_some() {
            return Err(format!("add-disk: {name:?} passed twice"));
        }
    }
    Ok(passed)
}

fn disk(info: DiskInfo) -> Answer {
    Answer::Disk(entry(&info))
}

fn device_entry(info: &DeviceInfo) -> DeviceEntry {
    match info {
        DeviceInfo::Disk(disk) => DeviceEntry::Disk(entry(disk)),
        DeviceInfo::Share(share) => DeviceEntry::Fs(share_entry(share)),
    }
}

fn share_entry(info: &ShareInfo) -> ShareEntry {
    ShareEntry {
        socket: info.socket.display().to_string(),
        spec: info.spec.clone(),
        tag: info.tag.clone(),
        dir: info.dir.display().to_string(),
        queues: info.queues,
        readonly: info.readonly,
        connected: info.connected,
    }
}

fn entry(info: &DiskInfo) -> DiskEntry {
    let limits = &info.limits;
    let all = [
        ("iops", limits.iops),
        ("read-iops", limits.read_iops),
        ("write-iops", limits.write_iops),
        ("bps", limits.bps),
        ("read-bps", limits.read_bps),
        ("write-bps", limits.write_bps),
        ("iops-burst", limits.iops_burst),
        ("bps-burst", limits.bps_burst),
    ];
    DiskEntry {
        socket: info.socket.display().to_string(),
        spec: info.spec.clone(),
        size: info.size,
        queues: info.queues,
        connected: info.connected,
        // The limits set (zero: none), by their `--disk` key.
        limits: all
            .iter()
            .filter(|(_, value)| *value > 0)
            .map(|(key, value)| ((*key).to_string(), *value))
            .collect(),
        checkpoints: info
            .checkpoints
            .iter()
            .map(|c| CheckpointEntry {
                name: c.name.clone(),
                valid: c.invalid.is_none(),
                reason: c.invalid.map(str::to_string),
            })
            .collect(),
        mirror: info.mirror.as_ref().map(mirror_entry),
    }
}

fn stats(disk: &DiskCounters) -> DiskStats {
    let queues = disk
        .queues
        .iter()
        .enumerate()
        .map(|(index, q)| {
            let [p50, p90, p99, p999] = q.latency_us;
            QueueStats {
                queue: index,
                requests: q.requests,
                errors: q.errors,
                read_bytes: q.read_bytes,
                write_bytes: q.write_bytes,
                ops: vbmq::worker::OpKind::NAMES
                    .iter()
                    .zip(q.ops)
                    .map(|(name, count)| ((*name).to_string(), count))
                    .collect(),
                in_flight: q.in_flight,
                passes: q.passes,
                busy_passes: q.busy_passes,
                unsupported: q.unsupported,
                sleep_ms: q.sleep_ns / 1_000_000,
                latency_us: Latency {
                    p50,
                    p90,
                    p99,
                    p999,
                },
            }
        })
        .collect();
    DiskStats {
        socket: disk.socket.display().to_string(),
        kind: match disk.kind {
            DeviceKind::Disk => Kind::Disk,
            DeviceKind::Fs => Kind::Fs,
        },
        queues,
        engine: disk
            .engine
            .iter()
            .map(|(name, value)| ((*name).to_string(), *value))
            .collect(),
    }
}
