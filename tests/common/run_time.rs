//! The files a disk added at run time takes (`vbmq ctl add-disk` passes them as descriptors),
//! and its changed-block maps.

use std::ffi::CString;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde_json::{Value, json};

use super::ctl::{ctl, ok, s};

/// `path` opened for reading, and writing if asked.
pub fn open(path: &Path, write: bool) -> OwnedFd {
    std::fs::OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .expect("open")
        .into()
}

/// A named pipe at `path` (a key handed over by a pipe).
pub fn mkfifo(path: &Path) {
    let name = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

/// Sends one `add-disk` line with `fds` named `names`, past ctl's own checks; the reply.
pub fn add(control: &Path, spec: &str, names: &[&str], fds: &[RawFd]) -> Value {
    let body = json!({"command": "add-disk", "spec": spec, "fds": names});
    super::control_request(control, &body, fds)
}

/// The answer of `changed-blocks SOCKET --since NAME` and its extents as (offset, length).
pub fn changed_blocks(control: &Path, socket: &Path, name: &str) -> (Value, Vec<(u64, u64)>) {
    let out = ctl(control, &["changed-blocks", s(socket), "--since", name]);
    let answer: Value = serde_json::from_str(&ok(&out)).unwrap();
    let extents = answer["extents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["offset"].as_u64().unwrap(), e["length"].as_u64().unwrap()))
        .collect();
    (answer, extents)
}

/// `changed-blocks --since NAME` refused (exit 1, nothing on stdout): its stderr.
pub fn no_extents(control: &Path, socket: &Path, name: &str) -> String {
    let out = ctl(control, &["changed-blocks", s(socket), "--since", name]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `vbmq ctl checkpoint SOCKET NAME`, which must succeed.
pub fn checkpoint(control: &Path, socket: &Path, name: &str) {
    ok(&ctl(control, &["checkpoint", s(socket), name]));
}

/// The two sides of a base's copy: the `base-fill=on` disk on `filled` copies all `blocks`
/// blocks of `block` bytes in the background; a read of 1 KiB on the `base-copy-on-read=on` disk
/// on `read` returns the base's bytes and copies the one block it touched.
pub fn fill_and_copy_on_read(
    control: &Path,
    filled: &Path,
    read: &Path,
    base: &[u8],
    block: usize,
) {
    use super::ctl::engine_stat;
    use std::time::{Duration, Instant};
    let blocks = engine_stat(control, filled, "thin_blocks");
    assert_eq!(blocks, (base.len() / block) as u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine_stat(control, filled, "thin_present_blocks") < blocks {
        assert!(Instant::now() < deadline, "the fill never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut reader = super::Client::connect(read, 1, false).unwrap();
    let (ret, data) = reader.read(0, 3 * block as u64 + 512, 1024);
    assert_eq!(ret, 0);
    assert!(data == base[3 * block + 512..3 * block + 1536]);
    assert_eq!(engine_stat(control, read, "thin_present_blocks"), 1);
}
