//! `--state FILE`: the disks added with `vbmq ctl add-disk` since start, so that a restarted
//! vbmq (an upgrade, `systemctl restart`) serves them again. `vbmq ctl` writes it, with the
//! operator's rights, after each `add-disk` and `remove-disk` vbmq accepted; `vbmq serve` reads
//! it at start, before it is confined, and opens them as it opens `--disk`s. The confined
//! daemon never writes it: what it names is what an operator added. It holds `--disk` texts
//! only: a `base=` disk comes back with its map (`DISK.map`, beside the image), a tracked disk
//! with its maps (`DISK.changes`: valid after a clean stop, invalid after a kill), an encrypted
//! disk's key is read again from its `key-file=` path (a disk whose key came through a pipe
//! is not recorded: `vbmq ctl` says so).
//!
//! ```toml
//! disk = ["socket=/srv/vm3/disk.sock,path=/var/lib/vm3.raw"]
//! ```

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vbmq::own_files::{self, Access, Create};

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct State {
    #[serde(default)]
    disk: Vec<String>,
}

/// The disks the file lists (none if it does not exist yet).
pub fn read(path: &Path) -> Result<Vec<String>, String> {
    match read_text(path) {
        Ok(text) => toml::from_str::<State>(&text)
            .map(|state| state.disk)
            .map_err(|e| format!("{}: {}", path.display(), e.message())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The file's text, never read through a symbolic link, and only from a regular file with one
/// link. Its owner is whoever ran `vbmq ctl`, who may not be `vbmq serve`'s user.
fn read_text(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() || metadata.nlink() != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "not a regular file with one link",
        ));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The socket a `--disk` text names, if it names one.
fn socket_of(text: &str) -> Option<&str> {
    text.split(',')
        .find_map(|item| item.strip_prefix("socket="))
}

/// Records `text` (a disk vbmq now serves), replacing a line of the same socket.
pub fn add(path: &Path, text: &str) -> Result<(), String> {
    update(path, |disks| {
        disks.retain(|d| socket_of(d) != socket_of(text));
        disks.push(text.to_string());
    })
}

/// Forgets any disk on the socket `text` (a `--disk` value) names: a disk served there now
/// but not recorded.
pub fn remove_spec_socket(path: &Path, text: &str) -> Result<(), String> {
    update(path, |disks| {
        disks.retain(|d| socket_of(d) != socket_of(text))
    })
}

/// Forgets the disk on `socket`.
pub fn remove(path: &Path, socket: &str) -> Result<(), String> {
    update(path, |disks| disks.retain(|d| socket_of(d) != Some(socket)))
}

/// Reads, changes and writes the file again (0600, by rename), under a lock beside it so that
/// two `vbmq ctl` at once lose neither change.
fn update(path: &Path, change: impl FnOnce(&mut Vec<String>)) -> Result<(), String> {
    let error = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let lock_path = with_suffix(path, ".lock");
    let lock = vbmq::socket_files::open_lock_file(&lock_path).map_err(|e| error(&e))?;
    // SAFETY: flock on a descriptor we own; released when `lock` closes.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(error(&std::io::Error::last_os_error()));
    }
    let mut disks = read(path)?;
    change(&mut disks);
    let text = toml::to_string(&State { disk: disks }).map_err(|e| error(&e))?;
    let temp = with_suffix(path, &format!(".{}.tmp", std::process::id()));
    let written = own_files::remove_stale(&temp)
        .and_then(|()| own_files::open(&temp, Access::read_write(Create::New(0o600))))
        .and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(error(&e));
    }
    Ok(())
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disks_are_recorded_replaced_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.toml");
        assert_eq!(read(&path).unwrap(), Vec::<String>::new());
        add(&path, "socket=/a.sock,null=1G").unwrap();
        add(&path, "socket=/b.sock,path=/b.raw").unwrap();
        add(&path, "socket=/a.sock,null=2G").unwrap();
        assert_eq!(
            read(&path).unwrap(),
            ["socket=/b.sock,path=/b.raw", "socket=/a.sock,null=2G"]
        );
        remove(&path, "/b.sock").unwrap();
        assert_eq!(read(&path).unwrap(), ["socket=/a.sock,null=2G"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
