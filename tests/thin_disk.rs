//! `base=`: a thin disk over a read-only base image, served by the real `vbmq` and driven
//! through libblkio. The base never changes; untouched blocks read from it; writes land in
//! DISK, which stays sparse; DISK.map survives `kill -9` at any instant.

mod common;

use std::mem::MaybeUninit;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use blkio::{Completion, ReqFlags};
use common::crash_io::{Killer, Rng, Sectors, clock_seed, try_flush, try_writes};
use common::run_time::fill_and_copy_on_read;
use common::{Client, Daemon, image, pattern, serve_with_control};

const SIZE: usize = 4 << 20;
const BLOCK: usize = 64 << 10;

fn spec(dir: &Path, name: &str, disk: &Path, base: &Path, extra: &str) -> String {
    format!(
        "socket={},path={},base={}{extra}",
        dir.join(name).display(),
        disk.display(),
        base.display()
    )
}

/// A base image `golden.raw` of `len` bytes of `pattern(seed)` in `dir`, and its fingerprint.
fn golden(dir: &Path, len: usize, seed: u64) -> (PathBuf, (Vec<u8>, i64, i64)) {
    let base = image(dir, "golden.raw", len, seed);
    let before = fingerprint(&base);
    (base, before)
}

/// The base's bytes and modification time, to check it never changes.
fn fingerprint(base: &Path) -> (Vec<u8>, i64, i64) {
    let meta = std::fs::metadata(base).unwrap();
    (
        std::fs::read(base).unwrap(),
        meta.mtime(),
        meta.mtime_nsec(),
    )
}

#[test]
fn untouched_blocks_read_the_base_and_writes_land_in_disk_only() {
    let dir = tempfile::tempdir().unwrap();
    let (base, before) = golden(dir.path(), SIZE, 1);
    let disk = dir.path().join("vm.raw");
    let socket = dir.path().join("vm.sock");
    let mut expected = pattern(1, SIZE);
    {
        let daemon = Daemon::start(&[spec(dir.path(), "vm.sock", &disk, &base, "")]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        assert_eq!(client.capacity(), SIZE as u64, "DISK takes the base's size");
        assert_eq!(
            client.read_all(SIZE),
            expected,
            "an untouched disk is the base"
        );
        // A partial write into a block: the rest of the block stays the base's.
        let (at, data) = (BLOCK + 8192, pattern(2, 4096));
        assert_eq!(client.write(0, at as u64, &data), 0);
        expected[at..at + 4096].copy_from_slice(&data);
        // A write across a block boundary, and a whole block.
        let (at2, data2) = (3 * BLOCK - 4096, pattern(3, 8192));
        assert_eq!(client.write(0, at2 as u64, &data2), 0);
        expected[at2..at2 + 8192].copy_from_slice(&data2);
        let (at3, data3) = (10 * BLOCK, pattern(4, BLOCK));
        assert_eq!(client.write(0, at3 as u64, &data3), 0);
        expected[at3..at3 + BLOCK].copy_from_slice(&data3);
        // Rewrites of a block DISK holds.
        let data4 = pattern(5, 512);
        assert_eq!(client.write(0, at as u64 + 512, &data4), 0);
        expected[at + 512..at + 1024].copy_from_slice(&data4);
        assert_eq!(client.flush(0), 0);
        // Reads spanning blocks DISK holds and blocks it lacks.
        client.assert_reads(
            0,
            0,
            &expected[..12 * BLOCK],
            "a read across present and absent blocks",
        );
        assert_eq!(client.read_all(SIZE), expected);
        // Write-zeroes over part of a block DISK lacks, two whole ones and part of a fourth,
        // and over part of a block it holds: zeros there, the base's bytes around.
        let (z, zlen) = (4 * BLOCK + 4096, 3 * BLOCK);
        assert_eq!(client.write_zeroes(0, z as u64, zlen as u64, true), 0);
        expected[z..z + zlen].fill(0);
        assert_eq!(client.write_zeroes(0, BLOCK as u64 + 512, 1024, false), 0);
        expected[BLOCK + 512..BLOCK + 1536].fill(0);
        client.assert_all(&expected, "after write-zeroes");
        // Discard is advisory: it succeeds.
        assert_eq!(client.discard(0, 20 * BLOCK as u64, BLOCK as u64), 0);
        drop(client);
        assert!(daemon.terminate().success());
    }
    assert!(fingerprint(&base) == before, "the base changed");
    let raw = std::fs::read(&disk).unwrap();
    assert_eq!(raw.len(), SIZE);
    assert!(
        raw[BLOCK..2 * BLOCK] == expected[BLOCK..2 * BLOCK],
        "the copied block is in DISK"
    );
    assert!(
        raw[..BLOCK].iter().all(|b| *b == 0),
        "an untouched block is not copied"
    );
    // Six blocks copied, two zeroed (holes punched): DISK stays sparse.
    let allocated = std::fs::metadata(&disk).unwrap().blocks() * 512;
    assert!(
        allocated <= 8 * BLOCK as u64,
        "DISK has {allocated} bytes allocated"
    );
    assert!(dir.path().join("vm.raw.map").exists());
    // A restart serves the same disk from DISK and its map.
    let daemon = Daemon::start(&[spec(dir.path(), "vm.sock", &disk, &base, "")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    client.assert_all(&expected, "after a restart");
    drop(client);
    assert!(daemon.terminate().success());
    assert!(fingerprint(&base) == before, "the base changed");
}

#[test]
fn two_disks_of_two_processes_share_one_base() {
    let dir = tempfile::tempdir().unwrap();
    let (base, before) = golden(dir.path(), SIZE, 7);
    let (a, b, c) = (
        dir.path().join("a.raw"),
        dir.path().join("b.raw"),
        dir.path().join("c.raw"),
    );
    let one = Daemon::start(&[
        spec(dir.path(), "a.sock", &a, &base, ""),
        spec(dir.path(), "b.sock", &b, &base, ",base-block=4K,cache=1M"),
    ]);
    let two = Daemon::start(&[spec(dir.path(), "c.sock", &c, &base, ",queues=2")]);
    let mut clients: Vec<Client> = ["a.sock", "b.sock", "c.sock"]
        .iter()
        .map(|s| Client::connect(&dir.path().join(s), 1, false).unwrap())
        .collect();
    for (i, client) in clients.iter_mut().enumerate() {
        assert_eq!(client.write(0, 4096, &[i as u8 + 1; 4096]), 0);
    }
    for (i, client) in clients.iter_mut().enumerate() {
        let (ret, data) = client.read(0, 0, 3 * 4096);
        assert_eq!(ret, 0);
        assert!(
            data[4096..8192].iter().all(|b| *b == i as u8 + 1),
            "disk {i}"
        );
        assert!(data[..4096] == pattern(7, 4096)[..], "disk {i}");
        assert!(data[8192..] == pattern(7, 3 * 4096)[8192..], "disk {i}");
    }
    drop(clients);
    assert!(one.terminate().success());
    assert!(two.terminate().success());
    assert!(fingerprint(&base) == before, "the base changed");
}

#[test]
fn background_fill_copies_the_whole_base_and_copy_on_read_what_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (base, before) = golden(dir.path(), SIZE, 9);
    let (filled, read) = (dir.path().join("filled.raw"), dir.path().join("read.raw"));
    let (fsock, rsock) = (dir.path().join("f.sock"), dir.path().join("r.sock"));
    let (daemon, control) = serve_with_control(
        dir.path(),
        &[
            spec(dir.path(), "f.sock", &filled, &base, ",base-fill=on"),
            spec(dir.path(), "r.sock", &read, &base, ",base-copy-on-read=on"),
        ],
    );
    let mut client = Client::connect(&fsock, 1, false).unwrap();
    assert_eq!(client.write(0, 5 * BLOCK as u64 + 4096, &[0xaa; 4096]), 0);
    fill_and_copy_on_read(&control, &fsock, &rsock, &pattern(9, SIZE), BLOCK);
    drop(client);
    assert!(daemon.terminate().success());
    let mut expected = pattern(9, SIZE);
    expected[5 * BLOCK + 4096..5 * BLOCK + 8192].fill(0xaa);
    assert!(
        std::fs::read(&filled).unwrap() == expected,
        "the filled DISK is the disk"
    );
    let raw = std::fs::read(&read).unwrap();
    assert!(raw[3 * BLOCK..4 * BLOCK] == pattern(9, SIZE)[3 * BLOCK..4 * BLOCK]);
    assert!(raw[..3 * BLOCK].iter().all(|b| *b == 0));
    assert!(fingerprint(&base) == before, "the base changed");
}

/// `vbmq serve --disk DISK` refused: its stderr.
fn refused(disk: &str) -> String {
    common::serve::refused_at_start(&["--disk", disk])
}

#[test]
fn what_a_thin_disk_cannot_be_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let base = image(dir.path(), "golden.raw", SIZE, 1);
    let full = image(dir.path(), "full.raw", SIZE, 2);
    let err = refused(&spec(dir.path(), "s.sock", &full, &base, ""));
    assert!(err.contains("map") && err.contains("missing"), "{err}");
    let err = refused(&spec(dir.path(), "s.sock", &full, &base, ",readonly=on"));
    assert!(err.contains("readonly"), "{err}");
    let disk = dir.path().join("vm.raw");
    drop(Daemon::start(&[spec(
        dir.path(),
        "s.sock",
        &disk,
        &base,
        "",
    )]));
    let _ = std::fs::remove_file(dir.path().join("s.sock"));
    let err = refused(&spec(dir.path(), "s.sock", &disk, &base, ",base-block=1M"));
    assert!(err.contains("base-block=65536"), "{err}");
    let err = refused(&spec(
        dir.path(),
        "s.sock",
        &disk,
        &full.with_extension("x"),
        "",
    ));
    assert!(err.contains("base"), "{err}");
    // DISK lost (or replaced by an empty file) while its map records blocks.
    let daemon = Daemon::start(&[spec(dir.path(), "s.sock", &disk, &base, "")]);
    let mut client = Client::connect(&dir.path().join("s.sock"), 1, false).unwrap();
    assert_eq!(client.write(0, 0, &[1u8; 4096]), 0);
    drop(client);
    assert!(daemon.terminate().success());
    std::fs::remove_file(&disk).unwrap();
    let err = refused(&spec(dir.path(), "s.sock", &disk, &base, ""));
    assert!(err.contains("replaced or truncated"), "{err}");
    let small = image(dir.path(), "small.raw", SIZE / 2, 1);
    let err = refused(&spec(dir.path(), "s.sock", &disk, &small, ""));
    assert!(err.contains("not the base"), "{err}");
}

/// The bytes a 4 KiB write numbered `seq` puts down.
fn write_data(seq: u64) -> Vec<u8> {
    pattern(1000 + seq, 4096)
}

#[test]
fn kill_9_under_writes_loses_no_acknowledged_write_and_shows_no_half_copied_block() {
    const CRASH_SIZE: usize = 32 << 20;
    const CRASH_BLOCK: usize = 16 << 10;
    const SECTOR: usize = 4096;
    // In memory (tmpfs, buffered): flushes cost little, so the instants a kill lands on are
    // spread over the copies and map updates rather than spent waiting for the disk.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (base, before) = golden(dir.path(), CRASH_SIZE, 3);
    let disk = dir.path().join("vm.raw");
    let socket = dir.path().join("vm.sock");
    let spec = spec(
        dir.path(),
        "vm.sock",
        &disk,
        &base,
        ",base-block=16K,direct=off",
    );
    let seed = clock_seed();
    let mut rng = Rng(seed);
    // What each 4 KiB sector may hold: the write last acknowledged there (`None`: the base's),
    // and the write in flight at the kill, which may or may not have landed.
    let mut acked: Vec<Option<u64>> = vec![None; CRASH_SIZE / SECTOR];
    let mut seq = 0u64;
    let start = Instant::now();
    let mut rounds = 0;
    // Blocks never written, in random order: most writes copy a block, where the order of
    // data and map matters.
    let mut targets = Sectors {
        fresh: (0..CRASH_SIZE / CRASH_BLOCK).collect(),
        per_unit: CRASH_BLOCK / SECTOR,
        count: CRASH_SIZE / SECTOR,
        anywhere: 8,
    };
    while rounds < 5 || (rounds < 60 && start.elapsed() < Duration::from_secs(25)) {
        rounds += 1;
        let delay = Duration::from_millis(10 + rng.next(150));
        let (mut daemon, mut client, killer) = Killer::start_doomed(&spec, &socket, delay);
        let killed = killer.killed.clone();
        // Batches of writes to distinct sectors, so that several copies are in flight at once.
        let mut in_flight: Vec<(usize, u64)> = Vec::new();
        while in_flight.is_empty() {
            let batch = targets.batch(&mut rng, &mut seq);
            let writes: Vec<(u64, Vec<u8>)> = batch
                .iter()
                .map(|(sector, seq)| ((sector * SECTOR) as u64, write_data(*seq)))
                .collect();
            let done = try_writes(&mut client, &writes, &killed);
            for (i, write) in batch.into_iter().enumerate() {
                match done[i] {
                    Some(0) => acked[write.0] = Some(write.1),
                    _ => in_flight.push(write),
                }
            }
            if in_flight.is_empty()
                && rng.next(16) == 0
                && try_flush(&mut client, &killed).is_none()
            {
                break;
            }
        }
        killer.join();
        let _ = daemon.child.wait();
        drop(client);
        // The killed process left its socket: the next one binds it anew.
        let _ = std::fs::remove_file(&socket);
        // Restart on the same DISK and map; every sector is what was acknowledged (or the
        // write in flight), and every other byte the base's.
        let daemon = Daemon::start(std::slice::from_ref(&spec));
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let now = client.read_all(CRASH_SIZE);
        let base_bytes = &before.0;
        for (sector, got) in now.chunks(SECTOR).enumerate() {
            let at = sector * SECTOR;
            let want =
                acked[sector].map_or_else(|| base_bytes[at..at + SECTOR].to_vec(), write_data);
            if got == want {
                continue;
            }
            if let Some(&(_, q)) = in_flight
                .iter()
                .find(|(s, q)| *s == sector && got == write_data(*q))
            {
                acked[sector] = Some(q);
                continue;
            }
            panic!(
                "round {rounds} (seed {seed}): sector {sector} holds neither the acknowledged \
                 write {:?} nor the base's bytes; first bytes {:?}",
                acked[sector],
                &got[..8]
            );
        }
        drop(client);
        assert!(daemon.terminate().success());
    }
    eprintln!("{rounds} rounds, {seq} writes");
    assert!(fingerprint(&base) == before, "the base changed");
}

/// Two queues copying the same blocks at once: one waits for the other's copy, and neither
/// copy undoes the other's write.
#[test]
fn two_queues_writing_one_new_block_keep_both_writes() {
    let dir = tempfile::tempdir().unwrap();
    let base = image(dir.path(), "golden.raw", SIZE, 5);
    let disk = dir.path().join("vm.raw");
    let socket = dir.path().join("vm.sock");
    let daemon = Daemon::start(&[spec(dir.path(), "vm.sock", &disk, &base, ",queues=2")]);
    let mut client = Client::connect(&socket, 2, false).unwrap();
    let mut expected = pattern(5, SIZE);
    let buf = client.region.addr as *mut u8;
    for round in 0..(SIZE / BLOCK / 16) {
        for q in 0..2 {
            for i in 0..16 {
                let block = round * 16 + i;
                let at = block * BLOCK + q * 4096 + 8192;
                let data = pattern((block * 2 + q) as u64 + 100, 4096);
                expected[at..at + 4096].copy_from_slice(&data);
                // SAFETY: the region holds BUF_LEN >= 2 * 16 * 4096 bytes.
                let slot = unsafe { buf.add((q * 16 + i) * 4096) };
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), slot, 4096) };
                client.queues[q].write(at as u64, slot, 4096, i, ReqFlags::empty());
            }
        }
        for q in 0..2 {
            let mut done = [const { MaybeUninit::<Completion>::uninit() }; 16];
            let mut timeout = Duration::from_secs(20);
            let n = client.queues[q]
                .do_io(&mut done, 16, Some(&mut timeout), None)
                .unwrap();
            assert_eq!(n, 16, "queue {q}: writes timed out");
            for c in &done[..n] {
                // SAFETY: do_io initialised `n` completions.
                assert_eq!(unsafe { c.assume_init_ref() }.ret, 0);
            }
        }
    }
    client.assert_all(&expected, "a write was lost");
    drop(client);
    assert!(daemon.terminate().success());
}

/// Not a test: the speed of a `base=` disk against the plain disk, 4 KiB random I/O at QD32
/// on a 256 MiB image in /dev/shm (`VBMQ_THIN_DIR`), vbmq's queue on CPU 1 (`VBMQ_THIN_CPU`),
/// the client wherever the scheduler puts it, 3 s a case (`VBMQ_THIN_SECS`). Run in release:
/// `cargo test --release --test thin_disk thin_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn thin_speed_against_the_plain_disk() {
    const BENCH_SIZE: usize = 256 << 20;
    let (secs, cpu) = common::speed_settings("THIN", 3.0);
    let place = std::env::var("VBMQ_THIN_DIR").unwrap_or_else(|_| "/dev/shm".into());
    let dir = tempfile::tempdir_in(place).unwrap();
    let base = dir.path().join("golden.raw");
    common::large_image(&base, BENCH_SIZE, 11);
    let plain = dir.path().join("plain.raw");
    let socket = dir.path().join("b.sock");
    let common = format!("queues=1,cpus={cpu},mode=adaptive");
    let run = |name: &str, disk: String, write: bool, stride: Option<u64>, prepare: &dyn Fn()| {
        prepare();
        let _ = std::fs::remove_file(&socket);
        let spec = format!("socket={},{disk},{common}", socket.display());
        let daemon = Daemon::start(&[spec]);
        let (iops, cpu) = common::speed(daemon, &socket, write, (BENCH_SIZE as u64, secs, stride));
        eprintln!("{name}: {iops:.0} IOPS, {cpu:.1} CPU s per 10^6 I/O");
    };
    let thin = dir.path().join("thin.raw");
    let fresh_thin = || {
        let _ = std::fs::remove_file(&thin);
        let _ = std::fs::remove_file(dir.path().join("thin.raw.map"));
    };
    let plain_copy = || {
        std::fs::copy(&base, &plain).unwrap();
    };
    let thin_spec = format!("path={},base={}", thin.display(), base.display());
    let filled_spec = format!("{thin_spec},base-fill=on");
    for round in 0..3 {
        eprintln!("round {round}");
        let plain_spec = format!("path={}", plain.display());
        let every_block = Some(BLOCK as u64);
        run(
            "plain randread",
            plain_spec.clone(),
            false,
            None,
            &plain_copy,
        );
        run(
            "base= randread, untouched",
            thin_spec.clone(),
            false,
            None,
            &fresh_thin,
        );
        run("plain randwrite", plain_spec.clone(), true, None, &|| {});
        run(
            "plain write, 1 per 64K",
            plain_spec.clone(),
            true,
            every_block,
            &|| {},
        );
        // Each write copies its block: the cost of first writes.
        run(
            "base= write, 1 per 64K",
            thin_spec.clone(),
            true,
            every_block,
            &fresh_thin,
        );
        // The disk filled in the background, then every block DISK's own.
        run(
            "base= randwrite, blocks already copied",
            filled_spec.clone(),
            true,
            None,
            &|| {
                fresh_thin();
                let spec = format!("socket={},{filled_spec}", socket.display());
                let _ = std::fs::remove_file(&socket);
                let daemon = Daemon::start(&[spec]);
                let map = dir.path().join("thin.raw.map");
                let want = 4096 + (BENCH_SIZE / BLOCK / 8) as u64;
                let deadline = Instant::now() + Duration::from_secs(300);
                // Filled when every map bit is set.
                loop {
                    let bits = std::fs::read(&map).unwrap();
                    if bits.len() as u64 == want && bits[4096..].iter().all(|b| *b == 0xff) {
                        break;
                    }
                    assert!(Instant::now() < deadline, "fill too slow");
                    std::thread::sleep(Duration::from_millis(100));
                }
                assert!(daemon.terminate().success());
            },
        );
        run(
            "base= randread, blocks already copied",
            thin_spec.clone(),
            false,
            None,
            &|| {},
        );
    }
    eprintln!(
        "nproc {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
