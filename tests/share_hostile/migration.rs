//! A hostile frontend's share state (`SET_DEVICE_STATE_FD`, load): paths that climb out of the
//! share or go through a link, states cut short, lying about their length, or made up, and
//! handles that would truncate or write. Each is refused (`CHECK_DEVICE_STATE` fails) or
//! loaded harmlessly; the share serves the next frontend and nothing outside it changes.

use serde_json::{Value, json};
use vbmq_driver::FsClient;

use super::share::Share;

/// The destination's session of a Linux guest.
fn session() -> Value {
    json!({ "major": 7, "minor": 38, "flags": 0 })
}

/// A state in vbmq's format: the magic, version 1, the body's length, the body.
fn framed(body: &[u8], claimed_len: u32) -> Vec<u8> {
    let mut bytes = b"vbmq-fs\n".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&claimed_len.to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

/// A state holding inode 2 at `path` and `handles` (handle, flags) on it.
fn state(path: &[u8], handles: &[(u64, i32)]) -> Vec<u8> {
    let handles: Vec<Value> = handles
        .iter()
        .map(|&(handle, flags)| json!({ "handle": handle, "inode": 2, "flags": flags }))
        .collect();
    let body = json!({
        "session": session(),
        "inodes": [{ "inode": 2, "lookups": 1, "path": path }],
        "handles": handles,
    })
    .to_string();
    framed(body.as_bytes(), u32::try_from(body.len()).unwrap())
}

/// Loads `bytes` through a fresh connection; the load's outcome.
fn load(share: &Share, bytes: &[u8]) -> std::io::Result<()> {
    let mut client = FsClient::connect_without_init(&share.socket()).unwrap();
    client.load_state(bytes)
}

#[test]
fn hostile_share_states_are_refused_or_harmless() {
    let mut share = Share::start("migration", false);
    let refused: [(&str, Vec<u8>); 8] = [
        ("a path through a link", state(b"link-out/x", &[])),
        ("a path climbing out", state(b"../outside/secret", &[])),
        ("an absolute path", state(b"/etc/passwd", &[])),
        (
            "a path through `..`",
            state(b"sub/../../outside/secret", &[]),
        ),
        (
            "a state cut short",
            state(b"file", &[]).split_at(20).0.to_vec(),
        ),
        ("a state longer than it says", framed(b"{} ", 2)),
        ("a length past the end", framed(b"{}", u32::MAX)),
        ("not JSON", framed(b"\xff\xfe", 2)),
    ];
    for (case, bytes) in refused {
        assert!(load(&share, &bytes).is_err(), "{case}: loaded");
        share.check_anew(case);
    }
    // Open flags that act once: the handle is opened again without them, the file keeps its
    // bytes (the check reads them).
    let truncating = libc::O_RDWR | libc::O_TRUNC | libc::O_CREAT | libc::O_EXCL;
    load(&share, &state(b"file", &[(7, truncating)])).unwrap();
    share.check_anew("a handle opened with O_TRUNC");
}

#[test]
fn a_read_only_share_loads_no_handle_that_writes() {
    let mut share = Share::start("migration-ro", true);
    for (case, flags) in [
        ("O_RDWR", libc::O_RDWR),
        ("O_WRONLY", libc::O_WRONLY),
        ("O_TRUNC", libc::O_RDONLY | libc::O_TRUNC),
    ] {
        assert!(
            load(&share, &state(b"file", &[(7, flags)])).is_err(),
            "{case}: loaded"
        );
        share.check_anew(case);
    }
    load(&share, &state(b"file", &[(7, libc::O_RDONLY)])).unwrap();
    share.check_anew("O_RDONLY");
}
