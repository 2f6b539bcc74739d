//! `--disk` values the tests write again and again.

use std::path::Path;

use super::s;

/// `socket=SOCKET,path=IMAGE`: a plain raw disk.
pub fn plain(socket: &Path, image: &Path) -> String {
    format!("socket={},path={}", s(socket), s(image))
}

/// `socket=SOCKET,path=IMAGE,encrypt=aes-xts,key-file=KEY`: an AES-XTS disk.
pub fn encrypted(socket: &Path, image: &Path, key: &Path) -> String {
    format!(
        "socket={},path={},encrypt=aes-xts,key-file={}",
        s(socket),
        s(image),
        s(key)
    )
}

/// `socket=SOCKET,path=IMAGE` followed by `extra` (`,key=value…`).
pub fn with(socket: &Path, image: &Path, extra: &str) -> String {
    format!("{}{extra}", plain(socket, image))
}
