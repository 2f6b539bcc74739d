//! The files this process uses (every disk's image and base, `DISK.map`, `DISK.changes`, key
//! files, lock files), by device and inode, so that a file a client passes to be written (a
//! snapshot target) is refused when it is one of them, under whatever name or link it came:
//! the snapshot would truncate it. Recorded where each file is opened, forgotten when the one
//! who opened it drops its [`Held`]; `vbmq ctl` is only a client, so the daemon checks.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

/// A file by device and inode.
type FileId = (u64, u64);

/// One entry per holder: a file held twice (two disks on one image) stays until both let go.
static HELD: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

/// A file recorded as in use until this is dropped.
#[derive(Debug)]
pub struct Held(FileId);

fn id(file: &File) -> io::Result<FileId> {
    let metadata = file.metadata()?;
    Ok((metadata.dev(), metadata.ino()))
}

fn held() -> std::sync::MutexGuard<'static, Vec<FileId>> {
    HELD.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records `file` as in use by this process while the result lives.
pub fn hold(file: &File) -> io::Result<Held> {
    let id = id(file)?;
    held().push(id);
    Ok(Held(id))
}

/// Whether `file` is a file this process uses.
pub fn is_held(file: &File) -> io::Result<bool> {
    let id = id(file)?;
    Ok(held().contains(&id))
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = held();
        if let Some(at) = held.iter().position(|id| *id == self.0) {
            held.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_held_under_any_name_until_its_last_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let file = File::create(&path).unwrap();
        let first = hold(&file).unwrap();
        let second = hold(&file).unwrap();
        std::fs::hard_link(&path, dir.path().join("other-name")).unwrap();
        let again = File::open(dir.path().join("other-name")).unwrap();
        assert!(is_held(&again).unwrap());
        drop(first);
        assert!(is_held(&again).unwrap(), "still held by the second");
        drop(second);
        assert!(!is_held(&again).unwrap());
    }
}
