//! `vbmq ctl snapshot SOCKET FILE`: the operator's process makes FILE (0600, a new file unless
//! `--force`) with the operator's rights and passes it to vbmq, which writes the disk's
//! contents at one instant into it (a confined vbmq cannot make files).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

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

/// Opens (with `--force`) or makes FILE, and refuses anything but a regular file.
pub fn open(target: &Target) -> Result<Opened, String> {
    let error = |e: &dyn std::fmt::Display| format!("{}: {e}", target.path.display());
    let mut options = OpenOptions::new();
    options.read(true).write(true).mode(0o600);
    if target.force {
        options.create(true);
    } else {
        options.create_new(true);
    }
    let existed = target.path.exists();
    let file = options.open(&target.path).map_err(|e| error(&e))?;
    let opened = Opened {
        file,
        created: !existed,
        path: target.path.clone(),
    };
    match opened.file.metadata() {
        Ok(m) if m.is_file() => Ok(opened),
        Ok(_) => Err(error(&"not a regular file")),
        Err(e) => Err(error(&e)),
    }
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
