//! What no single spec can see on its own: one socket path given twice.

use std::path::Path;

use super::{DiskSpec, FsSpec, SpecError};

/// Checks what no single disk can see on its own: one socket given to two disks. (Queues of
/// several disks may share a CPU: its one thread serves them all.)
pub fn check_disks(specs: &[DiskSpec]) -> Result<(), SpecError> {
    check_sockets(specs, &[], &[])
}

/// Checks that no socket path is given twice: to two disks, two shares, a disk and a share,
/// or to either and a socket the process serves besides (`others`: the control socket, named by
/// its flag). The second bind would take the first's path from it.
pub fn check_sockets(
    disks: &[DiskSpec],
    shares: &[FsSpec],
    others: &[(&str, &Path)],
) -> Result<(), SpecError> {
    let mut sockets: Vec<(&Path, &str)> = disks
        .iter()
        .map(|s| (s.socket.as_path(), "a disk"))
        .chain(shares.iter().map(|s| (s.socket.as_path(), "a share")))
        .chain(others.iter().map(|&(what, path)| (path, what)))
        .collect();
    sockets.sort_unstable();
    let Some(pair) = sockets.windows(2).find(|pair| pair[0].0 == pair[1].0) else {
        return Ok(());
    };
    let (path, a, b) = (pair[0].0.display(), pair[0].1, pair[1].1);
    let reason = match (a, b) {
        ("a disk", "a disk") => format!("{path} is given to two disks"),
        ("a share", "a share") => format!("{path} is given to two shares (--fs socket)"),
        _ => format!("{path} is given to {a} and to {b}"),
    };
    Err(SpecError {
        key: "socket".into(),
        reason,
    })
}
