//! `base=nbd+unix:///NAME?socket=PATH`: a thin disk whose base is an NBD export (qemu-nbd over
//! a raw image), served by the real, confined `vbmq` and read through libblkio. The disk reads
//! exactly the remote image, writes land in DISK only, the fill copies everything so that the
//! server can go, and a server killed mid-fill and started again loses nothing and serves no
//! wrong data; while it is away, reads of blocks not fetched yet fail after `base-timeout=`.

mod common;
#[path = "common/nbd_servers.rs"]
mod nbd_servers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::ctl::engine_stat;
use common::{Client, pattern, serve_with_control, sha256};
use nbd_servers::NbdServer;

const BLOCK: usize = 64 << 10;

/// A raw image of `len` patterned bytes beside its export's socket.
fn remote_image(dir: &Path, len: usize, seed: u64) -> (PathBuf, Vec<u8>) {
    let data = pattern(seed, len);
    let path = dir.join("remote.raw");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

fn spec(dir: &Path, nbd: &Path, extra: &str) -> String {
    format!(
        "socket={},path={},base=nbd+unix:///golden?socket={}{extra}",
        dir.join("vm.sock").display(),
        dir.join("vm.raw").display(),
        nbd.display(),
    )
}

/// Waits until every block of the disk on `socket` is in DISK.
fn wait_filled(control: &Path, socket: &Path) {
    let blocks = engine_stat(control, socket, "thin_blocks");
    let deadline = Instant::now() + Duration::from_secs(120);
    while engine_stat(control, socket, "thin_present_blocks") < blocks {
        assert!(Instant::now() < deadline, "the fill never finished");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn reads_the_remote_image_and_writes_land_in_disk_only() {
    const SIZE: usize = 8 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (remote, mut expected) = remote_image(dir.path(), SIZE, 351);
    let before = sha256(&remote);
    let nbd = dir.path().join("nbd.sock");
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    let (daemon, control) = serve_with_control(dir.path(), &[spec(dir.path(), &nbd, ",queues=2")]);
    let socket = dir.path().join("vm.sock");
    let mut client = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(
        client.capacity(),
        SIZE as u64,
        "the disk takes the export's size"
    );
    client.assert_all(&expected, "an untouched disk is the export");
    // Reads fetch without copying: DISK holds nothing yet.
    assert_eq!(engine_stat(&control, &socket, "thin_present_blocks"), 0);
    // A partial write, a write across two blocks, a whole block.
    for (at, seed, len) in [
        (BLOCK + 8192, 2, 4096),
        (3 * BLOCK - 4096, 3, 8192),
        (10 * BLOCK, 4, BLOCK),
    ] {
        let data = pattern(seed, len);
        assert_eq!(client.write(1, at as u64, &data), 0);
        expected[at..at + len].copy_from_slice(&data);
    }
    assert_eq!(client.flush(1), 0);
    // Across blocks DISK holds and blocks it lacks, on the other queue.
    client.assert_reads(
        0,
        0,
        &expected[..12 * BLOCK],
        "a read across present and absent blocks",
    );
    client.assert_all(&expected, "after the writes");
    drop(client);
    assert!(daemon.terminate().success());
    drop(server);
    assert_eq!(sha256(&remote), before, "the remote image changed");
    let raw = std::fs::read(dir.path().join("vm.raw")).unwrap();
    assert!(
        raw[BLOCK..2 * BLOCK] == expected[BLOCK..2 * BLOCK],
        "a written block is in DISK"
    );
    assert!(
        raw[..BLOCK].iter().all(|b| *b == 0),
        "an untouched block is not copied"
    );
}

#[test]
fn copy_on_read_and_fill_let_the_server_go() {
    const SIZE: usize = 4 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (remote, mut expected) = remote_image(dir.path(), SIZE, 352);
    let nbd = dir.path().join("nbd.sock");
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    let (daemon, control) = serve_with_control(
        dir.path(),
        &[spec(dir.path(), &nbd, ",base-copy-on-read=on,base-fill=on")],
    );
    let socket = dir.path().join("vm.sock");
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let data = pattern(9, 4096);
    assert_eq!(client.write(0, 5 * BLOCK as u64 + 512, &data), 0);
    expected[5 * BLOCK + 512..5 * BLOCK + 512 + 4096].copy_from_slice(&data);
    wait_filled(&control, &socket);
    server.kill();
    client.assert_all(&expected, "every block reads right with the server gone");
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn a_server_killed_mid_fill_and_started_again_loses_nothing() {
    // 4 KiB blocks: the fill takes many batches, so the kill lands in the middle.
    const SIZE: usize = 64 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (remote, expected) = remote_image(dir.path(), SIZE, 353);
    let nbd = dir.path().join("nbd.sock");
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    let (daemon, control) = serve_with_control(
        dir.path(),
        &[spec(
            dir.path(),
            &nbd,
            ",base-block=4K,base-fill=on,base-timeout=1",
        )],
    );
    let socket = dir.path().join("vm.sock");
    let blocks = engine_stat(&control, &socket, "thin_blocks");
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine_stat(&control, &socket, "thin_present_blocks") == 0 {
        assert!(Instant::now() < deadline, "the fill never began");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    let present = engine_stat(&control, &socket, "thin_present_blocks");
    assert!(
        present < blocks,
        "the fill ended before the kill: make the image larger"
    );
    // The last block is the fill's last: not fetched while the server is away. Its read
    // waits out base-timeout=1 and fails; it never returns other bytes.
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let last = (SIZE - 4096) as u64;
    let (ret, _) = client.read(0, last, 4096);
    assert_ne!(ret, 0, "a block never fetched read with the server away");
    // Blocks DISK holds are served meanwhile.
    let (ret, data) = client.read(0, 0, 4096);
    assert_eq!(ret, 0);
    assert!(data == expected[..4096]);
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    let (ret, data) = client.read(0, last, 4096);
    assert_eq!(ret, 0, "the read once the server is back");
    assert!(data == expected[SIZE - 4096..]);
    wait_filled(&control, &socket);
    drop(server);
    client.assert_all(&expected, "after the fill, without the server");
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn a_base_uri_that_is_not_served_is_refused_in_one_line() {
    let out = common::serve::exits_2_at_start(&[
        "--disk",
        "socket=/tmp/x.sock,path=/tmp/x.raw,base=nbd://host/x",
    ]);
    assert!(out.contains("base") && out.contains("TCP"), "{out}");
}

#[test]
fn a_disk_added_at_run_time_on_a_confined_vbmq_connects_again_after_a_restart() {
    const SIZE: usize = 4 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (remote, mut expected) = remote_image(dir.path(), SIZE, 354);
    let before = sha256(&remote);
    let nbd = dir.path().join("nbd.sock");
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    let (daemon, control) = serve_with_control(dir.path(), &[]);
    // `vbmq ctl` makes DISK and its map and passes them; vbmq connects to the export.
    let spec = spec(dir.path(), &nbd, "");
    common::ctl::ok(&common::ctl(&control, &["add-disk", &spec]));
    let socket = dir.path().join("vm.sock");
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.capacity(), SIZE as u64);
    let data = pattern(10, BLOCK);
    assert_eq!(client.write(0, 2 * BLOCK as u64, &data), 0);
    expected[2 * BLOCK..3 * BLOCK].copy_from_slice(&data);
    client.assert_reads(0, 0, &expected[..4 * BLOCK], "the export, and the write");
    // The server goes and comes back: the confined fetcher connects to the same path again.
    server.kill();
    let server = NbdServer::qemu_nbd(&remote, &nbd, "golden", true);
    client.assert_all(&expected, "after the server's restart");
    drop(client);
    drop(server);
    assert!(daemon.terminate().success());
    assert_eq!(sha256(&remote), before, "the remote image changed");
}
