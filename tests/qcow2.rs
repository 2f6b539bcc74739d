//! qcow2 images made by `qemu-img` and `qemu-io` (never by vbmq), served by the real `vbmq`
//! and read through libblkio: what the guest sees equals `qemu-img convert -O raw` of the same
//! image, for every feature a reader must know (chains, compressed, zero and extended-L2
//! clusters, v2 images, cluster sizes from 512 B to 2 MiB).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::disk_spec;
use common::tool::{qcow2_over, run_tool as run};
use common::{Client, Daemon, pattern};

const SIZE: usize = 4 << 20;

/// A raw file of `SIZE` bytes: a pattern, with zeroed stretches (what compression and
/// zero detection find).
fn raw_data(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let mut data = pattern(seed, SIZE);
    data[SIZE / 4..SIZE / 2].fill(0);
    data[SIZE - 100_000..].fill(0);
    let path = dir.join(name);
    std::fs::write(&path, data).unwrap();
    path
}

/// `qemu-img convert` of `raw` to a qcow2 image with `options` (and `-c`: compressed).
fn convert(dir: &Path, raw: &Path, name: &str, options: &str, compress: bool) -> PathBuf {
    let path = dir.join(name);
    let (raw, out) = (raw.to_str().unwrap(), path.to_str().unwrap());
    let mut args = vec!["convert", "-f", "raw", "-O", "qcow2", "-o", options];
    if compress {
        args.push("-c");
    }
    args.extend([raw, out]);
    run("qemu-img", &args);
    path
}

/// `qemu-io` commands on a qcow2 image.
fn qemu_io(image: &Path, commands: &[&str]) {
    let mut args = vec!["-f", "qcow2"];
    for c in commands {
        args.extend(["-c", c]);
    }
    args.push(image.to_str().unwrap());
    run("qemu-io", &args);
}

/// What QEMU reads from `image`: `qemu-img convert -O raw`.
fn qemu_view(image: &Path) -> Vec<u8> {
    let out = image.with_extension("qemu.raw");
    run(
        "qemu-img",
        &[
            "convert",
            "-O",
            "raw",
            image.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
    );
    std::fs::read(out).unwrap()
}

/// What vbmq serves from `image` (opened with `extra` keys).
fn vbmq_view(image: &Path, extra: &str) -> Vec<u8> {
    let dir = image.parent().unwrap();
    let socket = dir.join(format!(
        "{}.sock",
        image.file_name().unwrap().to_string_lossy()
    ));
    let daemon = Daemon::start(&[disk_spec::with(&socket, image, extra)]);
    let mut client = if extra.contains("readonly=on") {
        Client::read_only(&socket)
    } else {
        Client::connect(&socket, 1, false).unwrap()
    };
    let len = usize::try_from(client.capacity()).unwrap();
    let mut out = Vec::with_capacity(len);
    // Odd-sized reads: they cross clusters and subclusters.
    let chunk = 3 * 4096 + 512;
    while out.len() < len {
        let n = (len - out.len()).min(chunk);
        let (ret, data) = client.read(0, out.len() as u64, n);
        assert_eq!(ret, 0, "read at {}", out.len());
        out.extend_from_slice(&data);
    }
    drop(client);
    assert!(daemon.terminate().success());
    out
}

fn same_as_qemu(image: &Path, extra: &str) {
    let (qemu, vbmq) = (qemu_view(image), vbmq_view(image, extra));
    assert_eq!(qemu.len(), vbmq.len(), "{}: size", image.display());
    if let Some(at) = qemu.iter().zip(&vbmq).position(|(a, b)| a != b) {
        panic!(
            "{}: differs from qemu-img's view at byte {at}",
            image.display()
        );
    }
}

#[test]
fn images_of_every_layout_read_as_qemu_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "data.raw", 1);
    let mut images = vec![
        convert(dir.path(), &raw, "v3.qcow2", "cluster_size=65536", false),
        convert(dir.path(), &raw, "v2.qcow2", "compat=0.10", false),
        convert(dir.path(), &raw, "c512.qcow2", "cluster_size=512", false),
        convert(dir.path(), &raw, "c2m.qcow2", "cluster_size=2M", false),
        convert(
            dir.path(),
            &raw,
            "zlib.qcow2",
            "compression_type=zlib",
            true,
        ),
        convert(
            dir.path(),
            &raw,
            "zstd.qcow2",
            "compression_type=zstd",
            true,
        ),
        convert(
            dir.path(),
            &raw,
            "c4k-zlib.qcow2",
            "cluster_size=4096",
            true,
        ),
        convert(dir.path(), &raw, "extl2.qcow2", "extended_l2=on", false),
    ];
    // Zero clusters (v3 zero flag), and in a v2 image (deallocated, reads zeros).
    let zeroed = convert(dir.path(), &raw, "zero.qcow2", "cluster_size=65536", false);
    qemu_io(&zeroed, &["write -z 64k 192k", "write -z 1M 4k"]);
    images.push(zeroed);
    // Subclusters written one by one, zeroed, and left unallocated.
    let sub = convert(dir.path(), &raw, "extl2-sub.qcow2", "extended_l2=on", false);
    qemu_io(
        &sub,
        &[
            "write -P 0x5a 2k 2k",
            "write -z 8k 4k",
            "write -P 0x33 1M 6k",
        ],
    );
    images.push(sub);
    for image in &images {
        same_as_qemu(image, ",readonly=on");
    }
}

#[test]
fn a_chain_reads_through_every_layer_as_qemu_resolves_it() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("images");
    std::fs::create_dir(&sub).unwrap();
    // base.raw <- mid.qcow2 (extended L2) <- top.qcow2, backing names relative to each image.
    let base = raw_data(&sub, "base.raw", 2);
    let mid = sub.join("mid.qcow2");
    let top = sub.join("top.qcow2");
    qcow2_over(&mid, "raw", "base.raw", &["-o", "extended_l2=on"]);
    qemu_io(
        &mid,
        &[
            "write -P 0x11 60k 8k",
            "write -z 1M 64k",
            "write -P 0x12 2M 3k",
        ],
    );
    qcow2_over(&top, "qcow2", "mid.qcow2", &["-o", "cluster_size=4096"]);
    qemu_io(
        &top,
        &[
            "write -P 0x21 62k 1k",
            "write -P 0x22 1M 512",
            "write -z 3M 8k",
        ],
    );
    // Grown past the base: the tail reads zeros.
    run("qemu-img", &["resize", top.to_str().unwrap(), "6M"]);
    let base_before = std::fs::read(&base).unwrap();
    let mid_before = std::fs::read(&mid).unwrap();
    same_as_qemu(&top, "");
    assert!(
        std::fs::read(&base).unwrap() == base_before,
        "the base changed"
    );
    assert!(
        std::fs::read(&mid).unwrap() == mid_before,
        "the middle image changed"
    );
}

#[test]
fn format_is_refused_when_it_does_not_match() {
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "data.raw", 3);
    let socket = dir.path().join("s.sock");
    let refused = common::serve::exits_2_at_start(&[
        "--disk".to_string(),
        disk_spec::with(&socket, &raw, ",format=qcow2"),
    ]);
    assert!(refused.contains("not a qcow2 image"), "{refused}");
    // A raw image that starts with the qcow2 magic is not guessed raw.
    let mut data = std::fs::read(&raw).unwrap();
    data[..4].copy_from_slice(b"QFI\xfb");
    std::fs::write(&raw, &data).unwrap();
    let refused = common::serve::exits_2_at_start(&[
        "--disk".to_string(),
        format!("socket={},path={}", socket.display(), raw.display()),
    ]);
    assert!(refused.contains("format=raw"), "{refused}");
    // Two writers taking turns would each allocate from the end of the file they saw.
    let image = convert(
        dir.path(),
        &raw_data(dir.path(), "h.raw", 3),
        "h.qcow2",
        "cluster_size=65536",
        false,
    );
    let refused = common::serve::exits_2_at_start(&[
        "--disk".to_string(),
        disk_spec::with(&socket, &image, ",handover=on"),
    ]);
    assert!(refused.contains("handover=on"), "{refused}");
    // A qcow2 image names its own backing file; format= is for path= only.
    for (bad, key) in [
        (
            format!(
                "path={},format=qcow2,base={}",
                image.display(),
                raw.display()
            ),
            "format",
        ),
        ("null=1G,format=raw".to_string(), "format"),
        (format!("path={},format=vmdk", image.display()), "format"),
    ] {
        let refused = common::serve::exits_2_at_start(&[
            "--disk".to_string(),
            format!("socket={},{bad}", socket.display()),
        ]);
        assert!(
            refused.contains(&format!("--disk {key}")),
            "{bad}: {refused}"
        );
    }
    // Said raw, it is served as it is.
    let served = vbmq_view(&raw, ",format=raw,readonly=on");
    assert!(served == data);
}

/// `encrypt=` and `cache=` over a qcow2 disk: the guest's writes read back (after a restart
/// too), the clusters hold ciphertext only, and `qemu-img check` finds the image clean. (What
/// was never written reads as the decryption of zeros, as on a raw image.)
#[test]
fn encrypt_and_cache_compose_over_a_qcow2_disk() {
    const DISK: usize = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("vm.qcow2");
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            image.to_str().unwrap(),
            &DISK.to_string(),
        ],
    );
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(77, 64)).unwrap();
    let socket = dir.path().join("vm.sock");
    let spec = format!(
        "socket={},path={},encrypt=aes-xts,key-file={},cache=1M",
        socket.display(),
        image.display(),
        key.display()
    );
    let marker = b"QCOW2-PLAINTEXT-".repeat(256);
    let written = [0, (64 << 10) + 4096, 2 << 20, DISK - 8192];
    let reads_back = |client: &mut Client, when: &str| {
        for at in written {
            let (ret, back) = client.read(0, at as u64, marker.len());
            assert_eq!(ret, 0, "read at {at}");
            assert!(
                back == marker,
                "{when}: the write at {at} does not read back"
            );
        }
    };
    let daemon = Daemon::start(std::slice::from_ref(&spec));
    let mut client = Client::connect(&socket, 1, false).unwrap();
    for at in written {
        assert_eq!(client.write(0, at as u64, &marker), 0, "write at {at}");
    }
    assert_eq!(client.flush(0), 0);
    reads_back(&mut client, "through the cache");
    drop(client);
    assert!(daemon.terminate().success());
    qemu_check(&image, false);
    let stored = qemu_view(&image);
    assert!(
        !stored.windows(marker.len()).any(|w| w == marker.as_slice()),
        "plaintext in the image"
    );
    let daemon = Daemon::start(std::slice::from_ref(&spec));
    let mut client = Client::connect(&socket, 1, false).unwrap();
    reads_back(&mut client, "after a restart");
    drop(client);
    assert!(daemon.terminate().success());
}

/// `qemu-img check`: 0 clean, 3 leaked clusters only (allowed after a crash, as QEMU allows
/// them); anything else is corruption.
fn qemu_check(image: &Path, leaks_allowed: bool) {
    // A killed vbmq's rings release the image (and its lock) a little after it is reaped.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out = Command::new("qemu-img")
            .args(["check", image.to_str().unwrap()])
            .output()
            .unwrap();
        let locked = String::from_utf8_lossy(&out.stderr).contains("Failed to lock");
        if !locked || std::time::Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let code = out.status.code();
    let ok = code == Some(0) || (leaks_allowed && code == Some(3));
    assert!(
        ok,
        "qemu-img check {}: {code:?}\n{}{}",
        image.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes, write-zeroes and discards of every shape into `image` (over a raw base), then
/// checks what QEMU reads and `qemu-img check`.
fn writes_read_back_in_qemu(dir: &Path, create: &[&str]) {
    let base = raw_data(dir, "base.raw", 4);
    let image = dir.join("vm.qcow2");
    qcow2_over(&image, "raw", "base.raw", create);
    let mut expected = std::fs::read(&base).unwrap();
    let socket = dir.join("vm.sock");
    let daemon = Daemon::start(&[disk_spec::plain(&socket, &image)]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let mut write = |client: &mut Client, at: usize, data: Vec<u8>| {
        assert_eq!(client.write(0, at as u64, &data), 0, "write at {at}");
        expected[at..at + data.len()].copy_from_slice(&data);
    };
    // Part of a cluster (the rest copied from the base), across clusters, whole clusters,
    // then rewrites in place.
    write(&mut client, 8192 + 512, pattern(10, 4096));
    write(&mut client, (1 << 20) - 4096, pattern(11, 12288));
    write(&mut client, 2 << 20, pattern(12, 128 << 10));
    write(&mut client, 8192 + 1024, pattern(13, 1024));
    write(&mut client, (2 << 20) + 4096, pattern(14, 4096));
    // Inside subclusters of an allocated cluster (extended L2): some allocated, some not.
    write(&mut client, (1 << 20) + 40960, pattern(15, 2048));
    assert_eq!(client.flush(0), 0);
    let mut zero = |client: &mut Client, at: usize, len: usize, discard: bool| {
        let ret = if discard {
            client.discard(0, at as u64, len as u64)
        } else {
            client.write_zeroes(0, at as u64, len as u64, true)
        };
        assert_eq!(ret, 0, "zero at {at}");
        expected[at..at + len].fill(0);
    };
    // Whole clusters (allocated and not) and parts of clusters.
    zero(&mut client, 2 << 20, 64 << 10, false);
    zero(&mut client, 3 << 20, 192 << 10, true);
    zero(&mut client, 8192, 2048, false);
    zero(&mut client, (1 << 20) + 512, 512, true);
    assert_eq!(client.flush(0), 0);
    assert!(
        client.read_capacity() == expected,
        "vbmq reads back its writes"
    );
    drop(client);
    assert!(daemon.terminate().success());
    qemu_check(&image, false);
    if let Some(at) = qemu_view(&image)
        .iter()
        .zip(&expected)
        .position(|(a, b)| a != b)
    {
        panic!("{create:?}: QEMU reads another byte at {at}");
    }
}

#[test]
fn writes_zeroes_and_discards_read_back_in_qemu_and_check_clean() {
    for create in [
        &["-o", "cluster_size=65536"][..],
        &["-o", "extended_l2=on"],
        &["-o", "compat=0.10,cluster_size=4096"],
        &["-o", "cluster_size=512"],
        &["-o", "lazy_refcounts=on"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        writes_read_back_in_qemu(dir.path(), create);
    }
}

#[test]
fn images_with_internal_snapshots_or_left_dirty_are_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "data.raw", 5);
    let image = convert(dir.path(), &raw, "snap.qcow2", "cluster_size=65536", false);
    run(
        "qemu-img",
        &["snapshot", "-c", "before", image.to_str().unwrap()],
    );
    let socket = dir.path().join("s.sock");
    let refused = common::serve::exits_2_at_start(&[
        "--disk".to_string(),
        format!("socket={},path={}", socket.display(), image.display()),
    ]);
    assert!(refused.contains("internal snapshots"), "{refused}");
    // Read-only, it serves the active layer, and the snapshot is still there.
    same_as_qemu(&image, ",readonly=on");
    let out = Command::new("qemu-img")
        .args(["snapshot", "-l", image.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("before"));
    // An image a crash left dirty (lazy refcounts): its refcounts are QEMU's to rebuild.
    use std::os::unix::fs::FileExt;
    let lazy = convert(dir.path(), &raw, "lazy.qcow2", "lazy_refcounts=on", false);
    let file = common::files::open_rw(&lazy);
    let mut incompatible = [0u8; 8];
    file.read_exact_at(&mut incompatible, 72).unwrap();
    incompatible[7] |= 1;
    file.write_all_at(&incompatible, 72).unwrap();
    drop(file);
    let refused = common::serve::exits_2_at_start(&[
        "--disk".to_string(),
        format!("socket={},path={}", socket.display(), lazy.display()),
    ]);
    assert!(refused.contains("dirty"), "{refused}");
    same_as_qemu(&lazy, ",readonly=on");
}

/// First writes the guest never flushed still reach the image when vbmq stops on SIGTERM (the
/// table changes held in memory are written back at close), and QEMU reads them.
#[test]
fn unflushed_first_writes_reach_the_image_at_sigterm() {
    const DISK: usize = 8 << 20;
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("vm.qcow2");
    let path = image.to_str().unwrap();
    run(
        "qemu-img",
        &["create", "-f", "qcow2", path, &DISK.to_string()],
    );
    let socket = dir.path().join("vm.sock");
    let daemon = Daemon::start(&[format!("socket={},path={path}", socket.display())]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let mut expected = vec![0u8; DISK];
    for (i, at) in [0, (64 << 10) + 512, 3 << 20, DISK - 4096]
        .into_iter()
        .enumerate()
    {
        let data = pattern(20 + i as u64, 4096);
        assert_eq!(client.write(0, at as u64, &data), 0, "write at {at}");
        expected[at..at + data.len()].copy_from_slice(&data);
    }
    drop(client);
    assert!(daemon.terminate().success());
    qemu_check(&image, false);
    assert!(qemu_view(&image) == expected, "QEMU reads every write");
}

#[test]
fn kill_9_under_writes_leaves_a_clean_image_with_every_flushed_write() {
    kill_9_rounds(true);
}

/// As above, on an image with no backing file: first writes go to the ring, their clusters
/// allocated and named by entries the next flush writes back.
#[test]
fn kill_9_under_first_writes_without_a_backing_file() {
    kill_9_rounds(false);
}

/// Rounds of writes killed at a random instant, over a raw base or none; after each,
/// `qemu-img check` is clean (leaks allowed) and every flushed write is there.
fn kill_9_rounds(over_base: bool) {
    use common::crash_io::{self, Killer, Rng, Sectors, clock_seed};
    use std::time::{Duration, Instant};

    const DISK: usize = 8 << 20;
    const SECTOR: usize = 4096;
    const CLUSTER: usize = 64 << 10;
    // In memory (tmpfs, buffered): the instants a kill lands on are spread over the
    // allocations and table updates rather than spent waiting for a disk.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("vm.qcow2");
    let base_data = if over_base {
        let data = pattern(6, DISK);
        std::fs::write(dir.path().join("base.raw"), &data).unwrap();
        qcow2_over(&image, "raw", "base.raw", &[]);
        data
    } else {
        let path = image.to_str().unwrap();
        run(
            "qemu-img",
            &["create", "-f", "qcow2", path, &DISK.to_string()],
        );
        vec![0; DISK]
    };
    let socket = dir.path().join("vm.sock");
    let spec = disk_spec::with(&socket, &image, ",direct=off");
    let seed = clock_seed();
    let mut rng = Rng(seed);
    let data = |seq: u64| pattern(1000 + seq, SECTOR);
    // Per sector: the write a completed flush covered (`None`: the base's bytes), and the
    // writes since, any of which may have landed.
    let sectors = DISK / SECTOR;
    let mut durable: Vec<Option<u64>> = vec![None; sectors];
    let mut since: Vec<Vec<u64>> = vec![Vec::new(); sectors];
    let mut targets = Sectors {
        fresh: (0..DISK / CLUSTER).collect(),
        per_unit: CLUSTER / SECTOR,
        count: DISK / SECTOR,
        anywhere: 4,
    };
    let mut seq = 0u64;
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < 20 || (rounds < 40 && start.elapsed() < Duration::from_secs(30)) {
        rounds += 1;
        let delay = Duration::from_millis(5 + rng.next(100));
        let (mut daemon, mut client, killer) = Killer::start_doomed(&spec, &socket, delay);
        let killed = killer.killed.clone();
        loop {
            // Mostly clusters never written: allocations, where the order of writes matters.
            let batch = targets.batch(&mut rng, &mut seq);
            for (sector, seq) in &batch {
                since[*sector].push(*seq);
            }
            let writes: Vec<(u64, Vec<u8>)> = batch
                .iter()
                .map(|(s, q)| ((s * SECTOR) as u64, data(*q)))
                .collect();
            let done = crash_io::try_writes(&mut client, &writes, &killed);
            if done.iter().any(|r| *r != Some(0)) {
                assert!(done.iter().all(|r| matches!(r, None | Some(0))), "{done:?}");
                break;
            }
            if rng.next(3) == 0 {
                match crash_io::try_flush(&mut client, &killed) {
                    Some(0) => {
                        for (d, s) in durable.iter_mut().zip(&mut since) {
                            if let Some(last) = s.pop() {
                                *d = Some(last);
                            }
                            s.clear();
                        }
                    }
                    Some(e) => panic!("flush: {e}"),
                    None => break,
                }
            }
        }
        killer.join();
        let _ = daemon.child.wait();
        drop(client);
        let _ = std::fs::remove_file(&socket);
        qemu_check(&image, true);
        let daemon = Daemon::start(std::slice::from_ref(&spec));
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let now = client.read_capacity();
        for (sector, got) in now.chunks(SECTOR).enumerate() {
            let at = sector * SECTOR;
            let flushed = durable[sector].map_or_else(|| base_data[at..at + SECTOR].to_vec(), data);
            let landed = since[sector]
                .iter()
                .rev()
                .find(|q| got == data(**q))
                .copied();
            match landed {
                Some(q) => durable[sector] = Some(q),
                None => assert!(
                    got == flushed,
                    "round {rounds} (seed {seed}): sector {sector} lost its flushed write {:?}",
                    durable[sector]
                ),
            }
            since[sector].clear();
        }
        drop(client);
        assert!(daemon.terminate().success());
    }
    eprintln!("{rounds} rounds, {seq} writes");
    qemu_check(&image, true);
}

#[test]
fn a_guest_cannot_turn_a_raw_image_served_by_probing_into_a_qcow2_one() {
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "vm.raw", 7);
    // A header naming a host file as its backing file, as a guest would write it.
    let header_image = dir.path().join("evil.qcow2");
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-F",
            "raw",
            "-b",
            "/etc/passwd",
            header_image.to_str().unwrap(),
            "4M",
        ],
    );
    let evil = std::fs::read(&header_image).unwrap()[..4096].to_vec();
    let before = std::fs::read(&raw).unwrap();
    for (format, refused) in [("", true), (",format=raw", false)] {
        let socket = dir.path().join("vm.sock");
        let daemon = Daemon::start(&[disk_spec::with(&socket, &raw, format)]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let ret = client.write(0, 0, &evil);
        // Elsewhere than the start, the same bytes are only data.
        assert_eq!(client.write(0, 8192, &evil), 0);
        drop(client);
        assert!(daemon.terminate().success());
        let now = std::fs::read(&raw).unwrap();
        if refused {
            assert_ne!(ret, 0, "format=auto: the magic at offset 0 is refused");
            assert!(
                now[..4096] == before[..4096],
                "the refused write changed the image"
            );
        } else {
            assert_eq!(ret, 0, "format=raw: the guest's bytes are its own");
            assert!(now[..4096] == evil[..]);
        }
    }
}

#[test]
fn damaged_tables_give_io_errors_and_the_disk_keeps_serving() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "data.raw", 8);
    let image = convert(dir.path(), &raw, "bad.qcow2", "cluster_size=65536", false);
    // The first L1 entry points to an unaligned L2 table; an L2 entry of the second L2
    // table is left as it is.
    let file = common::files::open_rw(&image);
    let mut header = [0u8; 48];
    file.read_exact_at(&mut header, 0).unwrap();
    let l1 = u64::from_be_bytes(header[40..48].try_into().unwrap());
    file.write_all_at(&(0x8000_0000_0001_2200u64).to_be_bytes(), l1)
        .unwrap();
    drop(file);
    let socket = dir.path().join("bad.sock");
    let daemon = Daemon::start(&[disk_spec::with(&socket, &image, ",readonly=on")]);
    let mut client = Client::read_only(&socket);
    let (ret, _) = client.read(0, 0, 4096);
    assert_ne!(ret, 0, "a read through a damaged table fails");
    let (ret, _) = client.read(0, 0, 4096);
    assert_ne!(ret, 0);
    drop(client);
    assert!(
        daemon.terminate().success(),
        "vbmq survives a damaged image"
    );
}

#[test]
fn a_qcow2_disk_grows_and_qemu_sees_the_new_size_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let raw = raw_data(dir.path(), "data.raw", 9);
    let image = convert(dir.path(), &raw, "grow.qcow2", "cluster_size=65536", false);
    let socket = dir.path().join("grow.sock");
    let spec = format!("socket={},path={}", socket.display(), image.display());
    let (daemon, control) = common::serve_with_control(dir.path(), &[spec]);
    common::ctl::ok(&common::ctl(
        &control,
        &["resize", common::s(&socket), "12M"],
    ));
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.capacity(), 12 << 20);
    let tail = pattern(20, 64 << 10);
    assert_eq!(client.write(0, (10 << 20) + 4096, &tail), 0);
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());
    qemu_check(&image, false);
    let view = qemu_view(&image);
    assert_eq!(view.len(), 12 << 20, "qemu-img sees the new size");
    let mut expected = std::fs::read(&raw).unwrap();
    expected.resize(12 << 20, 0);
    expected[(10 << 20) + 4096..(10 << 20) + 4096 + tail.len()].copy_from_slice(&tail);
    assert!(
        view == expected,
        "QEMU reads the grown disk as vbmq wrote it"
    );
}
