//! An image file that shrinks under the running process: reads before the new end still return
//! the file's bytes; a read straddling it moves some bytes and then none, and a read past it
//! moves none: both get an error (not a hang, not stale or zero data), and the queue goes on.

mod common;

use common::disk_spec;
use common::{Client, Daemon, image, pattern};

#[test]
fn reads_across_and_past_a_shrunk_end_fail_and_the_queue_goes_on() {
    // A file system io_uring reads from directly, and tmpfs, which vbmq reads with preadv on
    // the queue's thread.
    let shm = std::path::Path::new("/dev/shm");
    let places = [
        ("on", None),
        ("off", None),
        ("off", Some(shm).filter(|p| p.is_dir())),
    ];
    for (direct, base) in places {
        let dir = match base {
            Some(base) => tempfile::tempdir_in(base).unwrap(),
            None => tempfile::tempdir().unwrap(),
        };
        let file = image(dir.path(), "disk.raw", 4 << 20, 3);
        let socket = dir.path().join("d.sock");
        let spec = disk_spec::with(&socket, &file, &format!(",direct={direct}"));
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let (ret, _) = client.read(0, 2 << 20, 8192);
        assert_eq!(
            ret, 0,
            "direct={direct} in {base:?}: read before the file shrank"
        );
        // Not at a sector boundary: the kernel returns the bytes up to it, then nothing.
        let end = (2 << 20) + 1000;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(end)
            .unwrap();
        let (ret, back) = client.read(0, 1 << 20, 64 << 10);
        assert_eq!(
            ret, 0,
            "direct={direct} in {base:?}: read before the new end"
        );
        assert!(back == pattern(3, 4 << 20)[1 << 20..(1 << 20) + (64 << 10)]);
        let (ret, _) = client.read(0, 2 << 20, 8192);
        assert_ne!(
            ret, 0,
            "direct={direct} in {base:?}: read across the new end succeeded"
        );
        let (ret, _) = client.read(0, 3 << 20, 4096);
        assert_ne!(
            ret, 0,
            "direct={direct} in {base:?}: read past the new end succeeded"
        );
        let (ret, back) = client.read(0, 0, 4096);
        assert_eq!(
            ret, 0,
            "direct={direct} in {base:?}: the queue no longer serves"
        );
        assert!(back == pattern(3, 4 << 20)[..4096]);
        drop(client);
        assert!(
            daemon.terminate().success(),
            "direct={direct} in {base:?}: exit status"
        );
    }
}
