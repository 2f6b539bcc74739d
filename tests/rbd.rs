//! RBD disks on a real single-node Ceph cluster, served by the real `vbmq serve` process
//! (confined, as by default) and driven by libblkio.

mod ceph;
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ceph::Cluster;
use common::ctl::ok;
use common::{Client, Daemon, image, pattern};

const SIZE: u64 = 64 << 20;

fn disk(dir: &Path, name: &str, extra: &str) -> (String, PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    (format!("socket={},{extra}", socket.display()), socket)
}

/// The image's bytes at `offset`, read by the `rbd` tool (not through vbmq).
fn exported(cluster: &Cluster, dir: &Path, name: &str, offset: usize, len: usize) -> Vec<u8> {
    let file = dir.join(format!("{name}.export"));
    let _ = std::fs::remove_file(&file);
    cluster.rbd(&["export", &format!("rbd/{name}"), file.to_str().unwrap()]);
    std::fs::read(&file).unwrap()[offset..offset + len].to_vec()
}

#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn rbd_disk_reads_writes_flushes_discards_and_zeroes_on_every_queue() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("img", SIZE);
    for mode in ["event", "poll", "adaptive"] {
        let (spec, socket) = disk(
            dir.path(),
            mode,
            &format!("{},queues=2,mode={mode},cpus=0-1", cluster.disk("img")),
        );
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 2, mode == "poll").unwrap();
        assert_eq!(client.capacity(), SIZE);
        for q in 0..2 {
            let data = pattern(10 + q as u64, 256 << 10);
            // Across an object boundary (RBD objects are 4 MiB).
            let offset = (q as u64 + 1) * (4 << 20) - (64 << 10);
            assert_eq!(client.write(q, offset, &data), 0, "{mode}: write on {q}");
            let (ret, back) = client.read(1 - q, offset, data.len());
            assert_eq!(ret, 0, "{mode}: read on queue {}", 1 - q);
            assert!(back == data, "{mode}: queue {} read other data", 1 - q);
        }
        assert_eq!(client.flush(1), 0, "{mode}: flush");
        // Discard and write-zeroes (with and without unmap) read back zeros.
        let ranges = [
            (1u64 << 20, 64u64 << 10),
            (2 << 20, 128 << 10),
            (3 << 20, 4096),
        ];
        for (i, &(offset, len)) in ranges.iter().enumerate() {
            assert_eq!(client.write(0, offset, &pattern(3, len as usize)), 0);
            let ret = match i {
                0 => client.discard(0, offset, len),
                1 => client.write_zeroes(1, offset, len, true),
                _ => client.write_zeroes(1, offset, len, false),
            };
            assert_eq!(ret, 0, "{mode}: zeroing #{i}");
            let (ret, back) = client.read(0, offset, len as usize);
            assert_eq!(ret, 0);
            assert!(back.iter().all(|&b| b == 0), "{mode}: #{i} not zeros");
        }
        drop(client);
        assert!(daemon.terminate().success(), "{mode}: exit status");
    }
    // The writes are in the cluster, as another client sees them.
    let offset = (4 << 20) - (64 << 10);
    assert!(exported(&cluster, dir.path(), "img", offset, 256 << 10) == pattern(10, 256 << 10));
}

#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn readonly_rbd_disk_refuses_writes_and_serves_reads() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("ro", SIZE);
    let (spec, socket) = disk(dir.path(), "rw", &cluster.disk("ro"));
    let daemon = Daemon::start(&[spec]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.write(0, 8192, &pattern(5, 8192)), 0);
    drop(client);
    assert!(daemon.terminate().success());

    let (spec, socket) = disk(
        dir.path(),
        "ro",
        &format!("{},readonly=on,serial=ro-disk", cluster.disk("ro")),
    );
    let daemon = Daemon::start(&[spec]);
    let mut client = Client::read_only(&socket);
    let (ret, back) = client.read(0, 8192, 8192);
    assert_eq!(ret, 0);
    assert!(back == pattern(5, 8192));
    drop(client);
    assert!(daemon.terminate().success());
    assert!(
        exported(&cluster, dir.path(), "ro", 0, 4096)
            .iter()
            .all(|&b| b == 0)
    );
}

/// An image resized by another client: vbmq follows it (the device's capacity, what `list`
/// shows and a frontend connecting now sees), and tells a connected frontend.
#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn an_image_resized_elsewhere_is_followed() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("grow", SIZE);
    let socket = dir.path().join("run/g.sock");
    let spec = format!("socket={},{}", socket.display(), cluster.disk("grow"));
    let (daemon, control) = common::serve_with_control(dir.path(), &[spec]);
    let before = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(before.capacity(), SIZE);
    cluster.rbd(&["resize", "--size", "128M", "rbd/grow"]);
    let size = || {
        let out = common::ctl(&control, &["list"]);
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list[0]["size"].as_u64().unwrap()
    };
    let start = Instant::now();
    while size() != 128 << 20 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the resize was not followed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(before);
    let mut after = Client::connect(&socket, 1, false).unwrap();
    after.uses_the_tail(128 << 20, 9, 0);
    drop(after);
    assert!(daemon.terminate().success());
}

/// `cache=` in front of an RBD image: what was read once is served from vbmq's memory (it reads
/// back while the OSD is stopped), writes go through to the cluster and refresh the cache.
#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn cached_rbd_disk_serves_reads_from_memory_and_writes_through() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("cached", SIZE);
    let (spec, socket) = disk(
        dir.path(),
        "d",
        &format!("{},queues=2,cache=8M", cluster.disk("cached")),
    );
    let daemon = Daemon::start(&[spec]);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    let data = pattern(7, 1 << 20);
    assert_eq!(client.write(0, 4 << 20, &data), 0);
    // Read once: the blocks are in the cache now.
    assert!(client.read(1, 4 << 20, data.len()).1 == data);
    cluster.signal_osd(libc::SIGSTOP);
    let start = Instant::now();
    let (ret, back) = client.read(0, 4 << 20, data.len());
    let elapsed = start.elapsed();
    cluster.signal_osd(libc::SIGCONT);
    assert_eq!(ret, 0);
    assert!(back == data, "the cache served other data");
    assert!(
        elapsed < Duration::from_secs(2),
        "a cached read waited for the stopped OSD ({elapsed:?})"
    );
    // A write replaces what the cache holds, and reaches the cluster.
    let newer = pattern(8, 64 << 10);
    assert_eq!(client.write(1, (4 << 20) + 4096, &newer), 0);
    assert!(client.read(0, (4 << 20) + 4096, newer.len()).1 == newer);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());
    assert!(exported(&cluster, dir.path(), "cached", (4 << 20) + 4096, 64 << 10) == newer);
}

#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn osd_stopped_mid_io_then_continued_loses_nothing() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("stop", SIZE);
    let (spec, socket) = disk(
        dir.path(),
        "d",
        &format!("{},queues=2", cluster.disk("stop")),
    );
    let daemon = Daemon::start(&[spec]);
    let client = Client::connect(&socket, 2, false).unwrap();
    const BLOCKS: u64 = 48;
    const BLOCK: usize = 64 << 10;
    let writer = std::thread::spawn(move || {
        let mut client = client;
        let results: Vec<i32> = (0..BLOCKS)
            .map(|i| {
                let q = (i % 2) as usize;
                let offset = i * (1 << 20);
                std::thread::sleep(Duration::from_millis(100));
                client.write(q, offset, &pattern(100 + i, BLOCK))
            })
            .collect();
        (client, results)
    });
    std::thread::sleep(Duration::from_millis(800));
    cluster.signal_osd(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(4));
    cluster.signal_osd(libc::SIGCONT);
    let (mut client, results) = writer.join().unwrap();
    assert!(
        results.iter().all(|&r| r == 0),
        "failed writes: {results:?}"
    );
    for i in 0..BLOCKS {
        let (ret, back) = client.read((i % 2) as usize, i * (1 << 20), BLOCK);
        assert_eq!(ret, 0);
        assert!(back == pattern(100 + i, BLOCK), "block {i} lost");
    }
    drop(client);
    assert!(daemon.terminate().success());
}

#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn osd_killed_fails_requests_while_a_file_disk_keeps_serving() {
    let mut cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("dead", SIZE);
    let file = image(dir.path(), "file.raw", 8 << 20, 4);
    let (rbd_spec, rbd_socket) = disk(
        dir.path(),
        "rbd",
        &format!("{},ceph-timeout=3", cluster.disk("dead")),
    );
    let (file_spec, file_socket) = disk(dir.path(), "file", &format!("path={}", file.display()));
    let daemon = Daemon::start(&[rbd_spec, file_spec]);
    let mut rbd = Client::connect(&rbd_socket, 1, false).unwrap();
    // Data in an object, so that its read must reach the OSD.
    assert_eq!(rbd.write(0, 0, &pattern(6, 65536)), 0);
    cluster.kill_osd();
    let started = Instant::now();
    let reader = std::thread::spawn(move || {
        let (read, _) = rbd.read(0, 0, 65536);
        let write = rbd.write(0, 1 << 20, &pattern(7, 4096));
        (read, write, started.elapsed())
    });
    // Meanwhile the file disk of the same process serves.
    let mut local = Client::connect(&file_socket, 1, false).unwrap();
    for i in 0..20u64 {
        assert_eq!(local.write(0, i * 4096, &pattern(i, 4096)), 0);
        let (ret, back) = local.read(0, i * 4096, 4096);
        assert_eq!(ret, 0);
        assert!(back == pattern(i, 4096));
    }
    let (read, write, elapsed) = reader.join().unwrap();
    assert_ne!(read, 0, "a read from a dead OSD succeeded");
    assert_ne!(write, 0, "a write to a dead OSD succeeded");
    eprintln!("two requests to the dead OSD failed after {elapsed:?}");
    drop(local);
    // The daemon still answers and exits cleanly.
    assert!(daemon.terminate().success());
}

/// A confined vbmq adds an `rbd=` disk at run time through the cluster connection an `rbd=`
/// disk made at start, with its socket outside the control socket's directory; a disk on a
/// cluster (here: a user) no connection was made for is refused.
#[cfg_attr(
    not(feature = "ceph-tests"),
    ignore = "needs feature ceph-tests: a single-node Ceph cluster (scripts/test.sh)"
)]
#[test]
fn an_rbd_disk_added_at_run_time_reuses_the_connection_made_at_start() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    cluster.create_image("boot", SIZE);
    cluster.create_image("added", SIZE);
    let (spec, _socket) = disk(dir.path(), "boot", &cluster.disk("boot"));
    let (daemon, control) = common::serve_with_control(dir.path(), &[spec]);
    let (added, socket) = disk(
        dir.path(),
        "added",
        &format!("{},queues=2", cluster.disk("added")),
    );
    let out = common::ctl(&control, &["add-disk", &added]);
    ok(&out);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    assert_eq!(client.capacity(), SIZE);
    let data = pattern(77, 128 << 10);
    assert_eq!(client.write(0, 1 << 20, &data), 0);
    assert!(client.read(1, 1 << 20, data.len()).1 == data);
    assert_eq!(client.flush(0), 0);
    drop(client);
    let out = common::ctl(&control, &["remove-disk", socket.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(exported(&cluster, dir.path(), "added", 1 << 20, data.len()) == data);
    // Another user: no connection was made for it at start.
    let (other, _) = disk(
        dir.path(),
        "other",
        &format!("{},ceph-user=other", cluster.disk("added")),
    );
    let out = common::ctl(&control, &["add-disk", &other]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only on a cluster"));
    daemon.terminate_alive();
}
