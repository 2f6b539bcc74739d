//! `track-changes=on`: named changed-block maps of a disk served by the real `vbmq` (default
//! confinement) and written through libblkio; `vbmq ctl checkpoint`, `changed-blocks` and
//! `forget-checkpoint`; the maps survive SIGTERM and are invalid, never wrong, after `kill -9`
//! or damage to `DISK.changes`.

mod common;

use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use blkio::{Completion, ReqFlags};
use common::crash_io::Killer;
use common::ctl::ok;
use common::disk_spec;
use common::run_time::{changed_blocks, checkpoint, no_extents};
use common::serve::refused_at_start;
use common::{Client, Daemon, ctl, image, serve_with_control, sparse_image};
use serde_json::Value;

const SIZE: usize = 4 << 20;
const BLOCK: u64 = 64 << 10;

fn spec(dir: &Path, disk: &Path, extra: &str) -> String {
    format!(
        "socket={},path={},track-changes=on{extra}",
        dir.join("vm.sock").display(),
        disk.display()
    )
}

/// `changed-blocks --since NAME` as (offset, length) pairs, checking the rest of the answer.
fn extents(control: &Path, socket: &Path, name: &str) -> Vec<(u64, u64)> {
    let (answer, extents) = changed_blocks(control, socket, name);
    assert_eq!(answer["name"], name);
    assert_eq!(answer["block_size"], BLOCK);
    assert_eq!(answer["capacity"], SIZE as u64);
    extents
}

/// The disk's checkpoints in `ctl list`: name and whether valid.
fn listed(control: &Path) -> Vec<(String, bool)> {
    let list: Value = serde_json::from_str(&ok(&ctl(control, &["list"]))).unwrap();
    list[0]["checkpoints"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["valid"].as_bool().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn restart(dir: &Path, disk_spec: &str) -> (Daemon, PathBuf, Client) {
    let (daemon, control) = serve_with_control(dir, &[disk_spec.to_string()]);
    let client = Client::connect(&dir.join("vm.sock"), 1, false).unwrap();
    (daemon, control, client)
}

fn exact_extents_and_a_clean_restart(extra: &str, base: bool) {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("vm.raw");
    let extra = if base {
        let golden = image(dir.path(), "golden.raw", SIZE, 3);
        format!(",base={}{extra}", golden.display())
    } else {
        image(dir.path(), "vm.raw", SIZE, 1);
        extra.to_string()
    };
    let disk_spec = spec(dir.path(), &disk, &extra);
    let socket = dir.path().join("vm.sock");
    let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
    assert!(dir.path().join("vm.raw.changes").exists(), "made at start");
    // Before any checkpoint: in no map.
    assert_eq!(client.write(0, 30 * BLOCK, &[7; 4096]), 0);
    checkpoint(&control, &socket, "a");
    assert_eq!(extents(&control, &socket, "a"), vec![]);
    assert_eq!(client.write(0, BLOCK, &[1; 4096]), 0); // block 1
    assert_eq!(client.write(0, 3 * BLOCK - 4096, &[2; 8192]), 0); // blocks 2 and 3
    assert_eq!(client.write_zeroes(0, 10 * BLOCK, BLOCK, true), 0); // block 10
    assert_eq!(client.discard(0, 20 * BLOCK, 2 * BLOCK), 0); // blocks 20, 21
    let (ret, _) = client.read(0, 50 * BLOCK, 4096); // a read changes nothing
    assert_eq!(ret, 0);
    checkpoint(&control, &socket, "b");
    assert_eq!(client.write(0, 40 * BLOCK + 512, &[3; 512]), 0); // block 40
    assert_eq!(client.write(0, BLOCK + 8192, &[4; 4096]), 0); // block 1 again
    assert_eq!(client.flush(0), 0);
    let a = vec![
        (BLOCK, 3 * BLOCK),
        (10 * BLOCK, BLOCK),
        (20 * BLOCK, 2 * BLOCK),
        (40 * BLOCK, BLOCK),
    ];
    let b = vec![(BLOCK, BLOCK), (40 * BLOCK, BLOCK)];
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);
    assert_eq!(
        listed(&control),
        vec![("a".to_string(), true), ("b".to_string(), true)]
    );
    // A taken name, a bad name, an unknown one.
    let taken = ctl(&control, &["checkpoint", socket.to_str().unwrap(), "a"]);
    assert_eq!(taken.status.code(), Some(2));
    let bad = ctl(&control, &["checkpoint", socket.to_str().unwrap(), "a/b"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = no_extents(&control, &socket, "nope");
    assert!(err.contains("no checkpoint named \"nope\""), "{err}");
    // A tracked disk does not shrink (tests/run_time_disks/changed_blocks_passed.rs grows one).
    let resize = ctl(
        &control,
        &["resize", socket.to_str().unwrap(), "2M", "--force"],
    );
    assert_eq!(resize.status.code(), Some(2));
    let err = String::from_utf8_lossy(&resize.stderr);
    // (With cache=, the cache above says it first.)
    assert!(
        err.contains("does not shrink") || err.contains("cache= only grows"),
        "{err}"
    );
    // Forget.
    checkpoint(&control, &socket, "c");
    ok(&ctl(
        &control,
        &["forget-checkpoint", socket.to_str().unwrap(), "c"],
    ));
    no_extents(&control, &socket, "c");
    drop(client);
    assert!(daemon.terminate().success());
    // A clean restart: the same extents, and writes from now on add to them.
    let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
    assert_eq!(extents(&control, &socket, "a"), a);
    assert_eq!(extents(&control, &socket, "b"), b);
    assert_eq!(client.write(0, 63 * BLOCK, &[5; 4096]), 0); // the last block
    let mut a2 = a.clone();
    a2.push((63 * BLOCK, BLOCK));
    assert_eq!(extents(&control, &socket, "a"), a2);
    drop(client);
    assert!(daemon.terminate().success());
    // Twice: still exact; while served, the file says "in use" (state 1 at bytes 12..16);
    // remove-disk closes it as SIGTERM does ("clean", 2).
    let state = || std::fs::read(dir.path().join("vm.raw.changes")).unwrap()[12..16].to_vec();
    let (daemon, control, client) = restart(dir.path(), &disk_spec);
    assert_eq!(extents(&control, &socket, "a"), a2);
    assert_eq!(listed(&control).len(), 2);
    assert_eq!(state(), 1u32.to_le_bytes());
    drop(client);
    ok(&ctl(&control, &["remove-disk", socket.to_str().unwrap()]));
    assert_eq!(state(), 2u32.to_le_bytes());
    assert!(daemon.terminate().success());
    let (daemon, control, client) = restart(dir.path(), &disk_spec);
    assert_eq!(extents(&control, &socket, "a"), a2);
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn extents_since_each_checkpoint_are_exact_and_survive_a_clean_restart() {
    // With a cache above the map: its close must reach the map at exit.
    exact_extents_and_a_clean_restart(",cache=1M", false);
}

#[test]
fn a_thin_disk_tracks_its_changes_too() {
    exact_extents_and_a_clean_restart("", true);
}

/// `vbmq serve --disk DISK` refused: its stderr.
fn refused(disk: &str) -> String {
    refused_at_start(&["--disk", disk])
}

#[test]
fn what_cannot_be_tracked_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    for (disk, why) in [
        ("null=1G", "only with path="),
        ("mem=1G", "only with path="),
        ("path=/x,readonly=on", "readonly"),
        ("path=/x,handover=on", "handover"),
    ] {
        let err = refused(&format!(
            "socket={},{disk},track-changes=on",
            sock.display()
        ));
        assert!(err.contains("track-changes") && err.contains(why), "{err}");
    }
}

#[test]
fn a_damaged_or_truncated_map_file_gives_no_extents_and_vbmq_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let disk_spec = spec(dir.path(), &disk, "");
    let socket = dir.path().join("vm.sock");
    let changes = dir.path().join("vm.raw.changes");
    let written = |name: &str| {
        let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
        let _ = ctl(
            &control,
            &["forget-checkpoint", socket.to_str().unwrap(), name],
        );
        checkpoint(&control, &socket, name);
        assert_eq!(client.write(0, 5 * BLOCK, &[9; 4096]), 0);
        assert_eq!(extents(&control, &socket, name), vec![(5 * BLOCK, BLOCK)]);
        drop(client);
        assert!(daemon.terminate().success());
    };
    let check = |name: &str, why: &str| {
        let (mut daemon, control, mut client) = restart(dir.path(), &disk_spec);
        let err = no_extents(&control, &socket, name);
        assert!(err.contains(why), "{err}");
        // Serving on, and a new checkpoint works.
        assert_eq!(client.write(0, 0, &[1; 4096]), 0);
        checkpoint(&control, &socket, "fresh");
        assert_eq!(client.write(0, 2 * BLOCK, &[1; 4096]), 0);
        assert_eq!(
            extents(&control, &socket, "fresh"),
            vec![(2 * BLOCK, BLOCK)]
        );
        ok(&ctl(
            &control,
            &["forget-checkpoint", socket.to_str().unwrap(), "fresh"],
        ));
        assert!(daemon.alive());
        drop(client);
        assert!(daemon.terminate().success());
    };
    // A bit flipped in the bitmaps: invalid, by name.
    written("a");
    let mut raw = std::fs::read(&changes).unwrap();
    raw[4096] ^= 0x40;
    std::fs::write(&changes, &raw).unwrap();
    check("a", "invalid: its file DISK.changes was damaged since a");
    // A bit flipped in the header, or the file truncated, or garbage: the names are lost.
    written("b");
    let mut raw = std::fs::read(&changes).unwrap();
    raw[130] ^= 0x01;
    std::fs::write(&changes, &raw).unwrap();
    check("b", "no checkpoint named \"b\"");
    written("c");
    let raw = std::fs::read(&changes).unwrap();
    std::fs::write(&changes, &raw[..4000]).unwrap();
    check("c", "no checkpoint named \"c\"");
    written("d");
    std::fs::write(&changes, vec![0xffu8; 100]).unwrap();
    check("d", "no checkpoint named \"d\"");
    // The bitmaps cut short.
    written("e");
    let raw = std::fs::read(&changes).unwrap();
    std::fs::write(&changes, &raw[..raw.len() - 8]).unwrap();
    check("e", "invalid");
    // The image written while vbmq was stopped.
    written("f");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&disk, common::pattern(2, SIZE)).unwrap();
    check(
        "f",
        "the image was modified while vbmq was not serving it since f",
    );
}

/// Writes 4 KiB at random offsets, one at a time, until the daemon is killed.
fn write_until_killed(client: &mut Client, rng: &mut u64, killed: &AtomicBool) -> u64 {
    let buf = client.region.addr as *mut u8;
    let mut written = 0;
    let mut done = [MaybeUninit::<Completion>::uninit(); 1];
    loop {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        let offset = *rng % (SIZE as u64 / 4096) * 4096;
        client.queues[0].write(offset, buf, 4096, 0, ReqFlags::empty());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(
                Instant::now() < deadline,
                "a write never answered by a live daemon"
            );
            let mut timeout = Duration::from_millis(50);
            match client.queues[0].do_io(&mut done, 1, Some(&mut timeout), None) {
                Ok(1) => break,
                Ok(_) if !killed.load(Ordering::SeqCst) => {}
                _ => return written,
            }
        }
        written += 1;
    }
}

#[test]
fn kill_9_under_writes_makes_every_map_invalid_never_wrong() {
    // In memory (tmpfs, buffered): the kill lands among many writes.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let disk_spec = spec(dir.path(), &disk, ",direct=off");
    let socket = dir.path().join("vm.sock");
    let seed = common::crash_io::clock_seed();
    let mut rng = seed;
    // A map that survived a clean stop first: its file says "clean" before the kill.
    let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
    checkpoint(&control, &socket, "r0");
    assert_eq!(client.write(0, 0, &[1; 4096]), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let mut names: Vec<String> = vec!["r0".into()];
    for round in 1..=4 {
        let (mut daemon, control, mut client) = restart(dir.path(), &disk_spec);
        if round == 1 {
            assert_eq!(extents(&control, &socket, "r0"), vec![(0, BLOCK)]);
        } else {
            for name in &names {
                let err = no_extents(&control, &socket, name);
                assert!(
                    err.contains(&format!(
                        "invalid: vbmq did not stop cleanly since {name}; take a full backup"
                    )),
                    "round {round}: {err}"
                );
            }
            assert!(listed(&control).iter().all(|(_, valid)| !valid));
        }
        let name = format!("r{round}");
        checkpoint(&control, &socket, &name);
        names.push(name.clone());
        assert_eq!(client.write(0, 7 * BLOCK, &[2; 4096]), 0);
        assert_eq!(extents(&control, &socket, &name), vec![(7 * BLOCK, BLOCK)]);
        let child = daemon.child.id();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let delay = Duration::from_millis(20 + rng % 200);
        let killer = Killer::after(child, delay);
        let killed = killer.killed.clone();
        let writes = write_until_killed(&mut client, &mut rng, &killed);
        eprintln!("round {round}: killed after {delay:?}, {writes} writes");
        killer.join();
        let _ = daemon.child.wait();
        assert!(!daemon.alive());
        drop(client);
        // The killed process left its sockets.
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&control);
    }
    let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
    for name in &names[1..] {
        no_extents(&control, &socket, name);
    }
    checkpoint(&control, &socket, "after");
    assert_eq!(client.write(0, 9 * BLOCK, &[3; 4096]), 0);
    assert_eq!(
        extents(&control, &socket, "after"),
        vec![(9 * BLOCK, BLOCK)]
    );
    drop(client);
    assert!(daemon.terminate().success());
}

#[test]
fn a_start_refused_for_another_disk_keeps_the_maps_valid() {
    let dir = tempfile::tempdir().unwrap();
    let disk = image(dir.path(), "vm.raw", SIZE, 1);
    let disk_spec = spec(dir.path(), &disk, "");
    let socket = dir.path().join("vm.sock");
    let (daemon, control, mut client) = restart(dir.path(), &disk_spec);
    checkpoint(&control, &socket, "a");
    assert_eq!(client.write(0, 2 * BLOCK, &[1; 4096]), 0);
    drop(client);
    assert!(daemon.terminate().success());
    // The tracked disk opens, the next one does not: vbmq exits, the maps stay clean.
    let missing = format!(
        "socket={},path={}",
        dir.path().join("b.sock").display(),
        dir.path().join("missing.raw").display()
    );
    let err = refused_at_start(&["--disk", &disk_spec, "--disk", &missing]);
    assert!(err.contains("missing.raw"));
    // Its socket may be left behind: the next start waits for a new one.
    let _ = std::fs::remove_file(&socket);
    let (daemon, control, client) = restart(dir.path(), &disk_spec);
    assert_eq!(extents(&control, &socket, "a"), vec![(2 * BLOCK, BLOCK)]);
    drop(client);
    assert!(daemon.terminate().success());
}

/// Not a test: the cost of tracking, 4 KiB random writes at QD32 on a 256 MiB image in
/// /dev/shm, vbmq's queue on CPU 1, 2 s a case, 3 rounds: the plain disk, a tracked disk with no
/// map live, and with 16 live maps (the most: every write marks 16 bitmaps). Run in release:
/// `cargo test --release --test changed_blocks tracking_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn tracking_speed_against_the_plain_disk() {
    const BENCH_SIZE: usize = 256 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = sparse_image(dir.path(), "vm.raw", BENCH_SIZE as u64);
    let socket = dir.path().join("vm.sock");
    let run = |name: &str, extra: &str, maps: usize| {
        let _ = std::fs::remove_file(dir.path().join("vm.raw.changes"));
        let spec = disk_spec::with(
            &socket,
            &disk,
            &format!(",queues=1,cpus=1,direct=off{extra}"),
        );
        let (daemon, control) = serve_with_control(dir.path(), &[spec]);
        for i in 0..maps {
            checkpoint(&control, &socket, &format!("m{i}"));
        }
        let (iops, cpu) = common::speed(daemon, &socket, true, (BENCH_SIZE as u64, 2.0, None));
        eprintln!("{name}: {iops:.0} IOPS, {cpu:.1} CPU s per 10^6 I/O");
    };
    for round in 0..3 {
        eprintln!("round {round}");
        run("plain randwrite", "", 0);
        run("tracked randwrite, no map", ",track-changes=on", 0);
        run("tracked randwrite, 16 maps", ",track-changes=on", 16);
    }
}
