use super::*;

fn state() -> ShareState {
    ShareState {
        session: Some(Session {
            major: 7,
            minor: 38,
            flags: 0x4000_0000 | (1 << 33),
        }),
        inodes: vec![
            InodeState {
                inode: 2,
                lookups: 3,
                path: b"dir".to_vec(),
                identity: None,
                lost: None,
            },
            InodeState {
                inode: 5,
                lookups: 1,
                path: b"dir/file \xff name".to_vec(),
                identity: Some(FileIdentity {
                    fsid: 0xec46_1558_36b1_023a,
                    handle_type: 1,
                    handle: vec![1, 2, 3, 4, 5, 6, 7, 8],
                }),
                lost: None,
            },
        ],
        handles: vec![
            HandleState {
                handle: 1,
                inode: 5,
                flags: libc::O_RDWR.unsigned_abs(),
            },
            HandleState {
                handle: 4,
                inode: 1,
                flags: libc::O_DIRECTORY.unsigned_abs(),
            },
        ],
    }
}

/// `state` encoded with `body` in place of its JSON.
fn with_body(body: &[u8]) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    bytes.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    bytes.extend_from_slice(body);
    bytes
}

#[test]
fn a_state_reads_back_as_written() {
    let bytes = state().encode().unwrap();
    assert_eq!(ShareState::decode(&bytes), Ok(state()));
    let empty = ShareState::default().encode().unwrap();
    assert_eq!(ShareState::decode(&empty), Ok(ShareState::default()));
}

#[test]
fn a_truncated_state_is_refused() {
    let bytes = state().encode().unwrap();
    for len in 0..bytes.len() {
        let decoded = ShareState::decode(&bytes[..len]);
        assert!(
            matches!(decoded, Err(StateError::Truncated(_))),
            "{len} bytes: {decoded:?}"
        );
    }
}

#[test]
fn trailing_bytes_and_oversized_states_are_refused() {
    let mut bytes = state().encode().unwrap();
    bytes.push(b' ');
    assert_eq!(ShareState::decode(&bytes), Err(StateError::Oversized));
    let huge = vec![0u8; MAX_STATE + 1];
    assert_eq!(ShareState::decode(&huge), Err(StateError::Oversized));
    // A header claiming more than arrived.
    let mut short = with_body(b"{}");
    short[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        ShareState::decode(&short),
        Err(StateError::Truncated(_))
    ));
}

#[test]
fn another_magic_or_version_is_refused() {
    let mut bytes = state().encode().unwrap();
    bytes[0] = b'V';
    assert_eq!(ShareState::decode(&bytes), Err(StateError::Magic));
    let mut bytes = state().encode().unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(ShareState::decode(&bytes), Err(StateError::Version(2)));
}

#[test]
fn a_body_that_is_not_a_state_is_refused() {
    for body in [
        &b"not json"[..],
        b"[]",
        b"{\"session\":null,\"inodes\":[],\"handles\":[],\"extra\":1}",
        b"{\"session\":null,\"inodes\":[{\"inode\":-2,\"lookups\":1,\"path\":[97]}],\"handles\":[]}",
        b"{\"session\":null,\"inodes\":[{\"inode\":2,\"lookups\":1,\"path\":[300]}],\"handles\":[]}",
    ] {
        let decoded = ShareState::decode(&with_body(body));
        assert!(
            matches!(decoded, Err(StateError::Body(_))),
            "{}: {decoded:?}",
            String::from_utf8_lossy(body)
        );
    }
}

fn with_path(path: &[u8]) -> Result<ShareState, StateError> {
    let mut state = state();
    state.inodes[1].path = path.to_vec();
    ShareState::decode(&state.encode().unwrap())
}

#[test]
fn a_path_that_is_not_plain_names_is_refused() {
    let long_name = vec![b'a'; 256];
    let long_path = [&b"a/"[..]; 2048].concat();
    for path in [
        &b""[..],
        b"..",
        b"../outside",
        b"dir/../../outside",
        b"dir/..",
        b"/etc/passwd",
        b"/",
        b"dir//file",
        b"dir/",
        b"./file",
        b"dir/./file",
        b"nul\0byte",
        &long_name,
        &long_path,
    ] {
        assert!(
            matches!(with_path(path), Err(StateError::Path(_))),
            "{}",
            String::from_utf8_lossy(path)
        );
    }
    assert!(with_path(b"dir/..file/...").is_ok());
    // A lost inode has no path, and needs none.
    let mut lost = state();
    lost.inodes[1].path.clear();
    lost.inodes[1].lost = Some("deleted".into());
    assert_eq!(ShareState::decode(&lost.encode().unwrap()), Ok(lost));
}

#[test]
fn reserved_repeated_or_unknown_numbers_are_refused() {
    let mut root = state();
    root.inodes[0].inode = 1;
    let mut zero = state();
    zero.inodes[0].inode = 0;
    let mut twice = state();
    twice.inodes[1].inode = 2;
    let mut forgotten = state();
    forgotten.inodes[0].lookups = 0;
    let mut no_fsid = state();
    no_fsid.inodes[1].identity.as_mut().unwrap().fsid = 0;
    let mut long_handle = state();
    long_handle.inodes[1].identity.as_mut().unwrap().handle = vec![0; MAX_HANDLE + 1];
    let mut no_handle = state();
    no_handle.inodes[1]
        .identity
        .as_mut()
        .unwrap()
        .handle
        .clear();
    let mut lost_with_path = state();
    lost_with_path.inodes[1].lost = Some("deleted".into());
    let mut handle_twice = state();
    handle_twice.handles[1].handle = 1;
    let mut unknown_inode = state();
    unknown_inode.handles[0].inode = 9;
    for bad in [
        root,
        zero,
        twice,
        forgotten,
        no_fsid,
        long_handle,
        no_handle,
        lost_with_path,
        handle_twice,
        unknown_inode,
    ] {
        let decoded = ShareState::decode(&bad.encode().unwrap());
        assert!(matches!(decoded, Err(StateError::Number(_))), "{bad:?}");
    }
}
