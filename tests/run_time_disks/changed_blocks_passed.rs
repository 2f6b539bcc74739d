//! `track-changes=on` disks added at run time to a vbmq started with its defaults (confined:
//! Landlock and seccomp): `vbmq ctl add-disk` opens `DISK.changes` and passes it with the image;
//! the maps are exact, `remove-disk` closes them cleanly and `add-disk` continues them, a restart
//! from `--state` finds them valid after SIGTERM and invalid after `kill -9`, an image written
//! while the disk was removed turns them invalid, and `reload --replace` serves the disk again
//! with its maps. Descriptors that are not a read-write regular file are refused with the reason,
//! and the daemon goes on.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::ctl::{each_refused, ok, refused, write_config};
use crate::common::disk_spec;
use crate::common::run_time::{add, changed_blocks, checkpoint, mkfifo, no_extents, open};
use crate::common::serve::serve_with_state;
use crate::common::{
    Client, Serve, ctl, ctl_state, image, pattern, s, serve_with_control, wait_for,
};

const SIZE: usize = 4 << 20;
const BLOCK: u64 = 64 << 10;

/// `changed-blocks --since NAME` as (offset, length) pairs.
fn extents(control: &Path, socket: &Path, name: &str) -> Vec<(u64, u64)> {
    let (answer, extents) = changed_blocks(control, socket, name);
    assert_eq!(answer["block_size"], BLOCK);
    extents
}

/// The state field of `DISK.changes` (bytes 12..16): 1 in use, 2 clean.
fn file_state(changes: &Path) -> u32 {
    let raw = std::fs::read(changes).unwrap();
    u32::from_le_bytes(raw[12..16].try_into().unwrap())
}

#[test]
fn a_tracked_disk_added_at_run_time_keeps_exact_maps_through_remove_add_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("run/ctl.sock");
    let state = dir.path().join("state.toml");
    let socket = dir.path().join("vm/vm.sock");
    let daemon = serve_with_state(&control, &state);
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let changes = dir.path().join("vm.raw.changes");
    let spec = format!("socket={},path={},track-changes=on", s(&socket), s(&disk));
    ok(&ctl_state(&control, &state, &["add-disk", &spec]));
    let mode = std::fs::metadata(&changes).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "DISK.changes made by ctl");
    assert_eq!(file_state(&changes), 1, "in use while served");

    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 30 * BLOCK, &[7; 4096]), 0); // before any map: in none
    checkpoint(&control, &socket, "a");
    assert_eq!(extents(&control, &socket, "a"), vec![]);
    assert_eq!(client.write(0, BLOCK, &[1; 4096]), 0); // block 1
    assert_eq!(client.write(0, 3 * BLOCK - 4096, &[2; 8192]), 0); // blocks 2, 3
    assert_eq!(client.write_zeroes(0, 10 * BLOCK, BLOCK, true), 0); // block 10
    assert_eq!(client.discard(0, 20 * BLOCK, 2 * BLOCK), 0); // blocks 20, 21
    checkpoint(&control, &socket, "b");
    assert_eq!(client.write(0, 40 * BLOCK + 512, &[3; 512]), 0); // block 40
    assert_eq!(client.write(0, BLOCK + 8192, &[4; 4096]), 0); // block 1 again
    assert_eq!(client.flush(0), 0);
    let mut a = vec![
        (BLOCK, 3 * BLOCK),
        (10 * BLOCK, BLOCK),
        (20 * BLOCK, 2 * BLOCK),
        (40 * BLOCK, BLOCK),
    ];
    let mut b = vec![(BLOCK, BLOCK), (40 * BLOCK, BLOCK)];
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);
    drop(client);

    // remove-disk closes the map file cleanly; add-disk continues the maps.
    ok(&ctl_state(&control, &state, &["remove-disk", s(&socket)]));
    assert_eq!(file_state(&changes), 2, "clean after remove-disk");
    ok(&ctl_state(&control, &state, &["add-disk", &spec]));
    assert_eq!(file_state(&changes), 1);
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);
    let mut client = Client::connect(&socket, 1, false).expect("connect again");
    assert_eq!(client.write(0, 63 * BLOCK, &[5; 4096]), 0); // the last block
    a.push((63 * BLOCK, BLOCK));
    b.push((63 * BLOCK, BLOCK));
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);
    drop(client);

    // SIGTERM, then started again from --state: the maps are valid and exact.
    assert!(daemon.terminate().success());
    assert_eq!(file_state(&changes), 2, "clean after SIGTERM");
    let _ = std::fs::remove_file(&socket);
    let mut daemon = serve_with_state(&control, &state);
    wait_for(&socket);
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);

    // kill -9, then started again from --state: every map invalid, no extents.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.child.id().cast_signed(), libc::SIGKILL) };
    let _ = daemon.child.wait();
    assert!(!daemon.alive());
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(&control);
    let daemon = serve_with_state(&control, &state);
    wait_for(&socket);
    for name in ["a", "b"] {
        let err = no_extents(&control, &socket, name);
        assert!(
            err.contains(&format!("invalid: vbmq did not stop cleanly since {name}")),
            "{err}"
        );
    }

    // A map begun on the restarted disk; the disk removed, its image written meanwhile, added
    // again: the passed image's time says so, and the map is invalid.
    checkpoint(&control, &socket, "c");
    ok(&ctl_state(&control, &state, &["remove-disk", s(&socket)]));
    ok(&ctl_state(&control, &state, &["add-disk", &spec]));
    assert_eq!(extents(&control, &socket, "c"), vec![], "unchanged: valid");
    ok(&ctl_state(&control, &state, &["remove-disk", s(&socket)]));
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&disk, pattern(2, SIZE)).unwrap();
    ok(&ctl_state(&control, &state, &["add-disk", &spec]));
    let err = no_extents(&control, &socket, "c");
    assert!(
        err.contains("the image was modified while vbmq was not serving it since c"),
        "{err}"
    );
    assert!(daemon.terminate().success());
}

#[test]
fn a_tracked_encrypted_base_disk_added_at_run_time_passes_eight_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve_with_control(dir.path(), &[]);
    let base = image(dir.path(), "golden.raw", SIZE, 3);
    let key = dir.path().join("k");
    std::fs::write(&key, pattern(9, 64)).unwrap();
    let disk = dir.path().join("thin.raw");
    let socket = dir.path().join("vm/vm.sock");
    // Socket, image and base (each twice: direct=on), map, key, changes.
    let spec = format!(
        "socket={},path={},base={},encrypt=aes-xts,key-file={},track-changes=on",
        s(&socket),
        s(&disk),
        s(&base),
        s(&key)
    );
    ok(&ctl(&control, &["add-disk", &spec]));
    checkpoint(&control, &socket, "n");
    let data = pattern(10, 4096);
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 2 * BLOCK + 512, &data), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert_eq!(extents(&control, &socket, "n"), vec![(2 * BLOCK, BLOCK)]);
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    ok(&ctl(&control, &["add-disk", &spec]));
    assert_eq!(extents(&control, &socket, "n"), vec![(2 * BLOCK, BLOCK)]);
    let mut client = Client::connect(&socket, 1, false).expect("connect again");
    client.assert_reads(0, 2 * BLOCK + 512, &data, "what was written reads back");
    drop(client);
    daemon.terminate_alive();
}

#[test]
fn bad_changes_files_are_refused_with_the_reason_and_the_daemon_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, control) = serve_with_control(dir.path(), &[]);
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let sock = dir.path().join("d.sock");
    let spec = disk_spec::with(&sock, &disk, ",direct=off,track-changes=on");
    // Through `vbmq ctl`: a FIFO where DISK.changes belongs (ctl checks it).
    let changes = PathBuf::from(format!("{}.changes", s(&disk)));
    mkfifo(&changes);
    refused(&ctl(&control, &["add-disk", &spec]), "not a regular file");
    std::fs::remove_file(&changes).unwrap();

    // Straight to the control socket: vbmq checks each descriptor.
    let listening = UnixListener::bind(&sock).unwrap();
    let l = listening.as_raw_fd();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    std::fs::File::create(&changes).unwrap();
    let (image_rw, dir_fd, fifo_rw) = (
        open(&disk, true),
        open(dir.path(), false),
        open(&fifo, true),
    );
    let (changes_ro, changes_rw) = (open(&changes, false), open(&changes, true));
    let names = ["socket", "image", "changes"];
    let with = |fd: &OwnedFd| [l, image_rw.as_raw_fd(), fd.as_raw_fd()];
    let plain = spec.replace(",track-changes=on", "");
    let cases = [
        (
            add(&control, &spec, &names, &with(&dir_fd)),
            "passed changes file: not a regular file",
        ),
        (
            add(&control, &spec, &names, &with(&fifo_rw)),
            "passed changes file: not a regular file",
        ),
        (
            add(&control, &spec, &names, &with(&changes_ro)),
            "passed changes file: not opened read-write",
        ),
        (
            add(&control, &spec, &names[..2], &with(&changes_rw)[..2]),
            "image and its map file DISK.changes are passed together",
        ),
        (
            add(&control, &plain, &names, &with(&changes_rw)),
            "a changes file was passed for a disk without track-changes=on",
        ),
    ];
    each_refused(&cases, &mut daemon);
    // A good set after the refusals is served and tracked.
    let reply = add(&control, &spec, &names, &with(&changes_rw));
    assert_eq!(reply["ok"], true, "{reply}");
    checkpoint(&control, &sock, "x");
    let mut client = Client::connect(&sock, 1, false).expect("connect");
    assert_eq!(client.write(0, 5 * BLOCK, &[1; 4096]), 0);
    drop(client);
    assert_eq!(extents(&control, &sock, "x"), vec![(5 * BLOCK, BLOCK)]);
    assert!(daemon.terminate().success());
}

#[test]
fn a_confined_reload_replaces_a_tracked_disk_with_its_maps() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let control = run.join("ctl.sock");
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let socket = run.join("t.sock");
    let line = |extra: &str| disk_spec::with(&socket, &disk, &format!(",track-changes=on{extra}"));
    let conf = dir.path().join("vbmq.toml");
    write_config(&conf, &control, &[line("")]);
    let daemon = Serve::config(&conf, &[&control, &socket]).start();
    checkpoint(&control, &socket, "a");
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 7 * BLOCK, &[1; 4096]), 0);
    drop(client);

    write_config(&conf, &control, &[line(",serial=other")]);
    let said = ok(&ctl(&control, &["reload", "--replace"]));
    assert!(said.contains("replaced"), "{said}");
    wait_for(&socket);
    assert_eq!(extents(&control, &socket, "a"), vec![(7 * BLOCK, BLOCK)]);
    let mut client = Client::connect(&socket, 1, false).expect("connect again");
    assert_eq!(client.write(0, 9 * BLOCK, &[2; 4096]), 0);
    drop(client);
    assert_eq!(
        extents(&control, &socket, "a"),
        vec![(7 * BLOCK, BLOCK), (9 * BLOCK, BLOCK)]
    );
    daemon.terminate_alive();
}

#[test]
fn a_tracked_disk_grows_and_its_grown_blocks_count_as_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, control) = serve_with_control(dir.path(), &[]);
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let socket = dir.path().join("vm/vm.sock");
    let spec = format!("socket={},path={},track-changes=on", s(&socket), s(&disk));
    ok(&ctl(&control, &["add-disk", &spec]));
    checkpoint(&control, &socket, "a");
    let mut client = Client::connect(&socket, 1, false).expect("connect");
    assert_eq!(client.write(0, 2 * BLOCK, &[1; 4096]), 0);
    drop(client);
    ok(&ctl(&control, &["resize", s(&socket), "6M"]));
    let grown = vec![(2 * BLOCK, BLOCK), (SIZE as u64, 2 << 20)];
    assert_eq!(extents(&control, &socket, "a"), grown);
    // A map begun now covers the new size; a write there is in it.
    checkpoint(&control, &socket, "b");
    let mut client = Client::connect(&socket, 1, false).expect("connect grown");
    assert_eq!(client.capacity(), 6 << 20);
    assert_eq!(client.write(0, (5 << 20) + 512, &[2; 4096]), 0);
    drop(client);
    let b = vec![(5 << 20, BLOCK)];
    assert_eq!(extents(&control, &socket, "b"), b);
    // Never shrinks, not even with --force.
    refused(
        &ctl(&control, &["resize", s(&socket), "5M", "--force"]),
        "does not shrink",
    );
    // The map file records the new size: removed and added again, the maps are valid.
    ok(&ctl(&control, &["remove-disk", s(&socket)]));
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 6 << 20);
    ok(&ctl(&control, &["add-disk", &spec]));
    assert_eq!(extents(&control, &socket, "a"), grown);
    assert_eq!(extents(&control, &socket, "b"), b);
    daemon.terminate_alive();
}
