//! `vbmq ctl snapshot SOCKET FILE`: the operator's process makes FILE (0600, a new file unless
//! `--force`) with the operator's rights and passes it to vbmq, which writes the disk's
//! contents at one instant into it (a confined vbmq cannot make files).

use std::fs::File;
use std::path::PathBuf;

use vbmq::own_files::{self, Access, Create};

/// Where a snapshot goes.
#[derive(Clone, Debug)]
pub struct Target {
    /// FILE.
    pub path: PathBuf,
    /// Overwrite FILE if it exists.
    pub force: bool,
}

/// FILE, open for writing, and whether this call made it.
pub struct Opened {
    /// The file to pass.
    pub file: File,
    created: bool,
    path: PathBuf,
}

/// Opens (with `--force`) or makes FILE (0600): never through a symbolic link, and only a
/// regular file of the caller's with one link (see `vbmq::own_files`). Nothing is written
/// here: vbmq refuses a file it already uses (an image, a map, a key file) before it writes.
pub fn open(target: &Target) -> Result<Opened, String> {
    let error = |e: &dyn std::fmt::Display| format!("{}: {e}", target.path.display());
    let made = own_files::open(&target.path, Access::read_write(Create::New(0o600)));
    let (file, created) = match made {
        Ok(file) => (file, true),
        Err(e) if target.force && e.kind() == std::io::ErrorKind::AlreadyExists => {
            let file = own_files::open(&target.path, Access::read_write(Create::No));
            (file.map_err(|e| error(&e))?, false)
        }
        Err(e) => return Err(error(&e)),
    };
    Ok(Opened {
        file,
        created,
        path: target.path.clone(),
    })
}

impl Opened {
    /// The snapshot failed: says so, and removes FILE if this call made it.
    pub fn discard(self) {
        let path = self.path.display();
        if self.created && std::fs::remove_file(&self.path).is_ok() {
            eprintln!("vbmq: {path} is not a snapshot: removed");
        } else {
            eprintln!("vbmq: {path} is not a snapshot");
        }
    }
}
