//! Files the tests open to change or inspect behind vbmq's back.

use std::fs::File;
use std::path::Path;

/// Opens `path` for reading and writing.
pub fn open_rw(path: impl AsRef<Path>) -> File {
    let path = path.as_ref();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}
