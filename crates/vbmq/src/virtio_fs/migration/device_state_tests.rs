use std::os::unix::fs::{MetadataExt, symlink};
use std::path::Path;

use fuse_backend_rs::api::filesystem::{Context, FileSystem};

use super::*;

/// A share over `dir/share` with `dir/share/dir/file`, links out of and into it, and a secret
/// outside.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let share = dir.path().join("share");
    std::fs::create_dir_all(share.join("dir")).unwrap();
    std::fs::create_dir_all(dir.path().join("outside")).unwrap();
    std::fs::write(share.join("dir/file"), b"data").unwrap();
    std::fs::write(dir.path().join("outside/secret"), b"secret").unwrap();
    symlink("../outside", share.join("link-out")).unwrap();
    symlink("/", share.join("link-root")).unwrap();
    symlink("dir", share.join("link-in")).unwrap();
    dir
}

fn device(dir: &Path) -> FsDevice {
    FsDevice::open(&dir.join("share"), "t", 1, false).unwrap()
}

fn session() -> Session {
    Session {
        major: 7,
        minor: 38,
        flags: 0,
    }
}

/// The source's guest: INIT, a lookup of `dir` and `dir/file`, `file` opened read-write.
fn guest_holds_file(device: &FsDevice) -> (u64, u64) {
    let ctx = Context::new();
    device.fs.init(FsOptions::empty()).unwrap();
    device.resume_session(session());
    let dir = device.fs.lookup(&ctx, 1, c"dir").unwrap().inode;
    let file = device.fs.lookup(&ctx, dir, c"file").unwrap().inode;
    device.fs.lookup(&ctx, dir, c"file").unwrap();
    let (handle, _, _) = device
        .fs
        .open(&ctx, file, libc::O_RDWR.unsigned_abs(), 0)
        .unwrap();
    (file, handle.unwrap())
}

#[test]
fn the_destination_holds_what_the_source_held_under_the_same_numbers() {
    let dir = tree();
    let source = device(dir.path());
    let (file, handle) = guest_holds_file(&source);
    let state = source.save_state().unwrap();
    let paths: Vec<_> = state.inodes.iter().map(|i| i.path.clone()).collect();
    assert_eq!(paths, [b"dir".to_vec(), b"dir/file".to_vec()]);
    assert_eq!(state.inodes[1].lookups, 2);
    let bytes = state.encode().unwrap();

    let destination = device(dir.path());
    destination
        .load_state(&ShareState::decode(&bytes).unwrap())
        .unwrap();
    assert_eq!(destination.session(), Some(session()));
    let held = destination.fs.export_inodes().unwrap();
    let numbers: Vec<_> = held.iter().map(|i| (i.inode, i.refcount)).collect();
    assert_eq!(numbers, [(file - 1, 1), (file, 2)]);
    let ino = std::fs::metadata(dir.path().join("share/dir/file"))
        .unwrap()
        .ino();
    assert_eq!(held[1].file.metadata().unwrap().ino(), ino);
    let handles = destination.fs.export_handles();
    assert_eq!(handles.len(), 1);
    assert_eq!((handles[0].handle, handles[0].inode), (handle, file));
    // New lookups and opens take numbers past the loaded ones.
    let ctx = Context::new();
    let other = destination.fs.lookup(&ctx, 1, c"link-in").unwrap().inode;
    assert!(other > file);
    let (next, _, _) = destination.fs.open(&ctx, file, 0, 0).unwrap();
    assert!(next.unwrap() > handle);
}

#[test]
fn a_held_file_deleted_or_moved_out_is_lost_and_fails_the_load_unless_guest_error() {
    let dir = tree();
    let source = device(dir.path());
    let (file, handle) = guest_holds_file(&source);
    std::fs::rename(
        dir.path().join("share/dir/file"),
        dir.path().join("outside/file"),
    )
    .unwrap();
    let moved = source.save_state().unwrap();
    assert!(moved.inodes[1].lost.is_some() && moved.inodes[1].path.is_empty());
    std::fs::remove_file(dir.path().join("outside/file")).unwrap();
    let deleted = source.save_state().unwrap();
    assert!(deleted.inodes[1].lost.is_some());

    let aborting = device(dir.path());
    assert!(aborting.load_state(&deleted).is_err());
    assert!(aborting.fs.export_inodes().unwrap().is_empty());
    assert_eq!(aborting.session(), None);

    let lenient = device(dir.path()).with_migration_on_error(OnError::GuestError);
    lenient.load_state(&deleted).unwrap();
    assert_eq!(lenient.session(), Some(session()));
    let held: Vec<_> = lenient
        .fs
        .export_inodes()
        .unwrap()
        .iter()
        .map(|i| i.inode)
        .collect();
    assert_eq!(held, [file - 1]);
    assert!(lenient.fs.export_handles().is_empty());
    // The guest's file answers EBADF; its handle too.
    let ctx = Context::new();
    let err = lenient.fs.getattr(&ctx, file, None).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBADF));
    let err = lenient.fs.getattr(&ctx, file, Some(handle)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EBADF));
}

fn state_with_path(path: &[u8]) -> ShareState {
    ShareState {
        session: Some(session()),
        inodes: vec![InodeState {
            inode: 7,
            lookups: 1,
            path: path.to_vec(),
            identity: None,
            lost: None,
        }],
        handles: Vec::new(),
    }
}

#[test]
fn a_path_through_a_symlink_or_out_of_the_share_is_refused_and_nothing_is_held() {
    let dir = tree();
    let destination = device(dir.path());
    for path in [
        &b"link-out/secret"[..],
        b"link-root/etc",
        b"link-in/file",
        b"../outside/secret",
        b"/etc/passwd",
        b"missing",
    ] {
        let loaded = destination.load_state(&state_with_path(path));
        assert!(loaded.is_err(), "{}", String::from_utf8_lossy(path));
        assert_eq!(destination.session(), None);
        assert!(destination.fs.export_inodes().unwrap().is_empty());
    }
    // A link as the last name is held itself, as a lookup of it holds it.
    destination
        .load_state(&state_with_path(b"link-out"))
        .unwrap();
    let held = destination.fs.export_inodes().unwrap();
    assert!(held[0].file.metadata().unwrap().file_type().is_symlink());
}

#[test]
fn a_handle_is_opened_again_without_truncating() {
    let dir = tree();
    let destination = device(dir.path());
    let mut state = state_with_path(b"dir/file");
    state.handles.push(HandleState {
        handle: 3,
        inode: 7,
        flags: (libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_EXCL).unsigned_abs(),
    });
    destination.load_state(&state).unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("share/dir/file")).unwrap(),
        b"data"
    );
    let handles = destination.fs.export_handles();
    assert_eq!(handles[0].flags, libc::O_RDWR.unsigned_abs());
    // The same state again: the numbers are the guest's, not the destination's to reuse.
    destination.load_state(&state).unwrap();
}

#[test]
fn a_read_only_share_loads_no_handle_open_for_writing() {
    let dir = tree();
    let destination = FsDevice::open(&dir.path().join("share"), "t", 1, true).unwrap();
    let mut state = state_with_path(b"dir/file");
    state.handles.push(HandleState {
        handle: 3,
        inode: 7,
        flags: libc::O_WRONLY.unsigned_abs(),
    });
    assert!(destination.load_state(&state).is_err());
    assert!(destination.fs.export_handles().is_empty());
    state.handles[0].flags = libc::O_RDONLY.unsigned_abs();
    destination.load_state(&state).unwrap();
}

#[test]
fn a_path_that_leads_to_another_file_of_the_same_file_system_is_refused() {
    let dir = tree();
    let source = device(dir.path());
    guest_holds_file(&source);
    let state = source.save_state().unwrap();
    let identity = state.inodes[1].identity.clone();
    assert!(identity.is_some(), "no file handle on this file system");
    // Another file takes the path between the save and the load.
    let share = dir.path().join("share");
    std::fs::write(share.join("dir/other"), b"other").unwrap();
    std::fs::rename(share.join("dir/other"), share.join("dir/file")).unwrap();
    let destination = device(dir.path());
    assert!(destination.load_state(&state).is_err());
    assert!(destination.fs.export_inodes().unwrap().is_empty());
    // A handle of another file system (a copy on another host): the path is all there is.
    let mut copied = state.clone();
    copied.inodes[1].identity.as_mut().unwrap().fsid ^= 1;
    destination.load_state(&copied).unwrap();
}
