//! `vbmq ctl`: one request to a running `vbmq serve --control PATH`, its reply on stdout.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use crate::control::passed_fds;
use crate::control::protocol::{Reply, Versioned};
use crate::ctl_disk::{self, Opened};

/// A request and where to send it.
pub struct Request {
    /// The control socket.
    pub control: PathBuf,
    /// The request.
    pub command: crate::control::Request,
    /// Where disks added and removed are recorded (`--state`).
    pub state: Option<PathBuf>,
    /// `snapshot`'s FILE.
    pub snapshot: Option<crate::ctl_snapshot::Target>,
    /// `export-begin --scratch-dir`.
    pub scratch_dir: Option<PathBuf>,
    /// `export-begin`'s and `mirror-begin`'s `--tls-creds`.
    pub tls_creds: Option<PathBuf>,
}

/// Sends the request; prints the result as JSON (exit 0) or the error as one line (exit 2;
/// exit 1 when the daemon cannot be reached, and when `changed-blocks` has no extents to trust). `add-disk` and `add-fs` first open and bind what
/// the device needs and pass it (see [`ctl_disk`] and [`crate::ctl_fs`]); `remove-disk` and
/// `remove-fs` remove the socket's files the daemon could not.
pub fn run(request: &Request) -> i32 {
    use crate::control::Request as R;
    let mut command = request.command.clone();
    let mut opened = Opened::default();
    let mut share = None;
    let mut snapshot = None;
    let mut export = None;
    let mut mirror = None;
    match &mut command {
        R::AddDisk { spec, fds } => {
            opened = match ctl_disk::open(spec) {
                Ok(opened) => opened,
                Err(e) => {
                    eprintln!("vbmq: {e}");
                    return 2;
                }
            };
            fds.clone_from(&opened.names);
        }
        R::AddFs { spec, mount } => match crate::ctl_fs::open_share(spec) {
            Ok(opened) => {
                *mount = opened.has_mount();
                share = Some(opened);
            }
            Err(e) => {
                eprintln!("vbmq: {e}");
                return 2;
            }
        },
        R::Snapshot { .. } => {
            let Some(target) = &request.snapshot else {
                eprintln!("vbmq: snapshot: no FILE");
                return 2;
            };
            match crate::ctl_snapshot::open(target) {
                Ok(opened) => snapshot = Some(opened),
                Err(e) => {
                    eprintln!("vbmq: {e}");
                    return 2;
                }
            }
        }
        R::ExportBegin {
            socket, address, ..
        } => {
            let list = || exchange(&request.control, &R::List, &[]);
            let (scratch, creds) = (request.scratch_dir.as_deref(), request.tls_creds.as_deref());
            match crate::ctl_export::open(socket, address, scratch, creds, list) {
                Ok(opened) => export = Some(opened),
                Err(e) => {
                    eprintln!("vbmq: {e}");
                    return 2;
                }
            }
        }
        R::MirrorBegin { destination, .. } => {
            let tls = crate::ctl_tls::connect(destination, request.tls_creds.as_deref());
            match tls.and_then(|tls| match tls {
                Some(fds) => Ok(fds),
                None => vbmq::host::nbd_unix_uri(destination).and_then(|(_, path)| {
                    UnixStream::connect(&path)
                        .map(|s| vec![s.into()])
                        .map_err(|e| format!("{}: {e}", path.display()))
                }),
            }) {
                Ok(fds) => mirror = Some(fds),
                Err(e) => {
                    eprintln!("vbmq: mirror-begin: {e}");
                    return 2;
                }
            }
        }
        R::ExportBeginWritable { address, .. } => {
            match crate::ctl_export::open_writable(address, request.tls_creds.as_deref()) {
                Ok(opened) => export = Some(opened),
                Err(e) => {
                    eprintln!("vbmq: {e}");
                    return 2;
                }
            }
        }
        _ => {}
    }
    let mut borrowed: Vec<BorrowedFd<'_>> = opened.fds.iter().map(AsFd::as_fd).collect();
    if let Some(share) = &share {
        borrowed.extend(share.fds());
    }
    if let Some(snapshot) = &snapshot {
        borrowed.push(snapshot.file.as_fd());
    }
    if let Some(export) = &export {
        borrowed.extend(export.fds());
    }
    if let Some(fds) = &mirror {
        borrowed.extend(fds.iter().map(AsFd::as_fd));
    }
    let result = exchange(&request.control, &command, &borrowed);
    drop(borrowed);
    let bound = opened.bound.take();
    let created = std::mem::take(&mut opened.created);
    let key_is_pipe = opened.key_is_pipe;
    drop(opened);
    let done = result.as_ref().is_ok_and(|reply| reply.ok);
    if let Some(share) = share
        && !done
    {
        share.discard();
    }
    // Served or not, the daemon holds its own copy of the socket: ours goes.
    if let Some(export) = export {
        if done {
            drop(export);
        } else {
            export.discard();
        }
    }
    // A vbmq that ended mid-copy, or refused it: FILE is no snapshot (said after the error).
    let unfinished = snapshot.filter(|_| !done);
    let reply = match result {
        Ok(reply) => reply,
        Err(e) => {
            if let Some(socket) = &bound {
                ctl_disk::remove_stale_socket(socket);
            }
            // Whether vbmq took the disk is not known: what was made for it stays.
            eprintln!("vbmq: {}: {e}", request.control.display());
            if let Some(snapshot) = unfinished {
                snapshot.discard();
            }
            return 1;
        }
    };
    if !reply.ok {
        if let Some(socket) = &bound {
            ctl_disk::remove_stale_socket(socket);
        }
        ctl_disk::remove_created(&created);
        eprintln!("vbmq: {}", reply.error.as_deref().unwrap_or("failed"));
        if let Some(snapshot) = unfinished {
            snapshot.discard();
        }
        // No extents to trust, whatever the reason: the backup tool takes a full backup.
        return if matches!(command, R::ChangedBlocks { .. }) {
            1
        } else {
            2
        };
    }
    match &command {
        R::RemoveDisk { socket } => ctl_disk::remove_stale_socket(Path::new(socket)),
        R::RemoveFs { socket } => crate::ctl_fs::remove_files(Path::new(socket)),
        R::ExportEnd { address, .. } => {
            if let Ok(path) = crate::ctl_export::unix_path(address) {
                crate::ctl_export::remove_socket(&path);
            }
        }
        _ => {}
    }
    // Served (or stopped) whether or not the record can be written: said, not failed.
    let recorded = match (&request.state, &command) {
        // A pipe gave its key once: a restart could not read it again (docs/control.md).
        (Some(state), R::AddDisk { spec, .. }) if key_is_pipe => {
            eprintln!(
                "vbmq: served, but not recorded in --state: its key-file is a pipe, which a \
                 restart cannot read again: add the disk again after a restart"
            );
            crate::state_file::remove_spec_socket(state, spec)
        }
        (Some(state), R::AddDisk { spec, .. }) => crate::state_file::add(state, spec),
        (Some(state), R::RemoveDisk { socket }) => crate::state_file::remove(state, socket),
        _ => Ok(()),
    };
    if let Err(e) = recorded {
        eprintln!("vbmq: done, but not recorded in --state: {e}");
    }
    match reply.result {
        None | Some(crate::control::protocol::Answer::Nothing) => {}
        Some(result) => println!(
            "{}",
            serde_json::to_string_pretty(&result).unwrap_or_default()
        ),
    }
    0
}

pub(crate) fn exchange(
    control: &Path,
    command: &crate::control::Request,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<Reply> {
    let stream = UnixStream::connect(control)?;
    let body = Versioned {
        version: crate::control::VERSION,
        request: command,
    };
    let mut line = serde_json::to_vec(&body).map_err(std::io::Error::other)?;
    line.push(b'\n');
    passed_fds::send(&stream, &line, fds)?;
    let mut reply = String::new();
    if BufReader::new(stream).read_line(&mut reply)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "vbmq closed the connection without a reply (did it exit?)",
        ));
    }
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}
