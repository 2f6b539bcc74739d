//! The DRAM read cache's own promises, on the engines and through the daemon.

mod common;

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::disk_spec;
use common::{Client, Serve, image, pattern};
use vbmq::backend::{
    CachedDisk, Disk, Engine, EngineOptions, FileDisk, Geometry, IoOp, IovList, cache::CacheStats,
};

const BLOCK: usize = 4096;

fn options() -> EngineOptions {
    EngineOptions {
        depth: 64,
        batch: true,
        notify: false,
    }
}

fn cached(path: &Path, size: u64, label: &str) -> CachedDisk {
    let file = FileDisk::open(path, false, true).unwrap();
    CachedDisk::open(Arc::new(file), path, size, label).unwrap()
}

/// Runs one operation on `engine` and returns its result.
fn run(engine: &mut dyn Engine, op: IoOp) -> i32 {
    engine.push(op, 77).unwrap();
    engine.submit().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut result = None;
    loop {
        engine.reap(&mut |tag, r| {
            assert_eq!(tag, 77);
            result = Some(r);
        });
        if let Some(result) = result {
            return result;
        }
        assert!(Instant::now() < deadline, "operation never completed");
        engine.wait().unwrap();
    }
}

fn read(engine: &mut dyn Engine, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let result = run(
        engine,
        IoOp::Read {
            offset,
            // SAFETY: `iov` and `buf` outlive the operation, which `run` completes.
            iov: unsafe { IovList::new(&iov, 1) },
        },
    );
    assert_eq!(result, i32::try_from(len).unwrap(), "read at {offset}");
    buf
}

fn write(engine: &mut dyn Engine, offset: u64, data: &[u8]) -> i32 {
    let iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    run(
        engine,
        IoOp::Write {
            offset,
            // SAFETY: `iov` and `data` outlive the operation, which `run` completes.
            iov: unsafe { IovList::new(&iov, 1) },
        },
    )
}

fn delta(after: CacheStats, before: CacheStats) -> (u64, u64) {
    (after.hits - before.hits, after.misses - before.misses)
}

#[test]
fn hits_come_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "d.raw", 4 << 20, 1);
    let disk = cached(&path, 1 << 20, "hits");
    let mut e = disk.engine(options()).unwrap();
    let first = read(e.as_mut(), 8192, 3 * BLOCK);
    assert_eq!(first, pattern(1, 4 << 20)[8192..8192 + 3 * BLOCK]);
    // Changed behind vbmq's back: a hit still returns what was cached, so it came from there.
    std::fs::write(&path, vec![0u8; 4 << 20]).unwrap();
    let before = disk.stats();
    assert!(read(e.as_mut(), 8192, 3 * BLOCK) == first);
    assert!(read(e.as_mut(), 8192 + 1024, 512) == first[1024..1536]);
    assert_eq!(delta(disk.stats(), before), (2, 0));
    // A block never read is a miss and reads the file.
    assert!(read(e.as_mut(), 1 << 20, BLOCK).iter().all(|b| *b == 0));
    assert_eq!(delta(disk.stats(), before), (2, 1));
}

/// A block's contents: its number and a version, then filler.
fn versioned(block: u64, version: u64) -> Vec<u8> {
    let mut data = vec![version as u8; BLOCK];
    data[..8].copy_from_slice(&block.to_le_bytes());
    data[8..16].copy_from_slice(&version.to_le_bytes());
    data
}

#[test]
fn readers_never_see_data_older_than_a_completed_write() {
    const BLOCKS: u64 = 256;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.raw");
    let initial: Vec<u8> = (0..BLOCKS).flat_map(|b| versioned(b, 0)).collect();
    std::fs::write(&path, initial).unwrap();
    // Room for about a third of the blocks: fills, hits and evictions all race with writes.
    let disk = Arc::new(cached(&path, 96 * 4224, "race"));
    let published: Arc<Vec<AtomicU64>> = Arc::new((0..BLOCKS).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let progress: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    // The cache full before the race: every fill during it evicts a block (how many fills a
    // reader's miss completes before a write drops it depends on the machine's speed).
    {
        let mut e = disk.engine(options()).unwrap();
        for block in 0..BLOCKS {
            let data = read(e.as_mut(), block * BLOCK as u64, BLOCK);
            assert_eq!(data, versioned(block, 0), "block {block} before the race");
        }
    }
    let readers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (disk, published, stop) = (disk.clone(), published.clone(), stop.clone());
            let progress = progress.clone();
            std::thread::spawn(move || {
                let mut e = disk.engine(options()).unwrap();
                let mut x = seed + 1;
                let mut checked = 0u64;
                while !stop.load(Ordering::Acquire) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let block = (x >> 33) % (BLOCKS - 1);
                    // Sometimes two blocks: part hit, part miss.
                    let count = 1 + (x >> 20) as usize % 2;
                    let floor: Vec<u64> = (0..count as u64)
                        .map(|i| published[(block + i) as usize].load(Ordering::Acquire))
                        .collect();
                    let data = read(e.as_mut(), block * BLOCK as u64, count * BLOCK);
                    for (i, chunk) in data.chunks(BLOCK).enumerate() {
                        let number = u64::from_le_bytes(chunk[..8].try_into().unwrap());
                        let version = u64::from_le_bytes(chunk[8..16].try_into().unwrap());
                        assert_eq!(number, block + i as u64, "wrong block");
                        assert!(
                            version >= floor[i],
                            "block {number}: read version {version} after {} completed",
                            floor[i]
                        );
                    }
                    checked += 1;
                    progress[seed as usize].store(checked, Ordering::Relaxed);
                }
                checked
            })
        })
        .collect();
    let mut e = disk.engine(options()).unwrap();
    let mut versions = vec![0u64; BLOCKS as usize];
    let mut x = 99u64;
    // At least 3000 writes, and on until both readers have checked 200 reads (a loaded machine
    // may keep a reader off the CPU for a while).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut writes = 0;
    let behind = || progress.iter().any(|p| p.load(Ordering::Relaxed) < 200);
    // A reader that found stale data has panicked: stop and report it.
    while (writes < 3000 || behind()) && !readers.iter().any(|r| r.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "readers made too little progress"
        );
        writes += 1;
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let block = (x >> 33) % BLOCKS;
        versions[block as usize] += 1;
        let v = versions[block as usize];
        assert_eq!(
            write(e.as_mut(), block * BLOCK as u64, &versioned(block, v)),
            i32::try_from(BLOCK).unwrap()
        );
        published[block as usize].store(v, Ordering::Release);
    }
    stop.store(true, Ordering::Release);
    for reader in readers {
        assert!(
            reader.join().unwrap() >= 200,
            "readers made too little progress"
        );
    }
    eprintln!("after the race: {}", disk.stats());
    // Quiet now: every block reads as its last completed write, once from the file or the
    // cache, then again from the cache.
    for block in 0..BLOCKS {
        let want = versioned(block, versions[block as usize]);
        for _ in 0..2 {
            assert_eq!(
                read(e.as_mut(), block * BLOCK as u64, BLOCK),
                want,
                "block {block} after the race"
            );
        }
    }
    let stats = disk.stats();
    assert!(stats.hits > 0 && stats.evictions > 0, "{stats}");
}

/// A disk whose writes reach the file (or not) but report an error: a device failing mid-write.
struct FailingDisk {
    inner: FileDisk,
    reaches_file: bool,
}

struct FailingEngine {
    inner: Box<dyn Engine>,
    reaches_file: bool,
    failed: Vec<u64>,
    writes: HashMap<u64, ()>,
}

impl Disk for FailingDisk {
    fn geometry(&self) -> Geometry {
        self.inner.geometry()
    }

    fn engine(&self, options: EngineOptions) -> std::io::Result<Box<dyn Engine>> {
        Ok(Box::new(FailingEngine {
            inner: self.inner.engine(options)?,
            reaches_file: self.reaches_file,
            failed: Vec::new(),
            writes: HashMap::new(),
        }))
    }

    fn supports_discard(&self) -> bool {
        true
    }
}

impl Engine for FailingEngine {
    fn push(&mut self, op: IoOp, tag: u64) -> std::io::Result<()> {
        match op {
            IoOp::Write { .. } if !self.reaches_file => {
                self.failed.push(tag);
                Ok(())
            }
            IoOp::Write { .. } => {
                self.writes.insert(tag, ());
                self.inner.push(op, tag)
            }
            _ => self.inner.push(op, tag),
        }
    }

    fn submit(&mut self) -> std::io::Result<()> {
        self.inner.submit()
    }

    fn wait(&mut self) -> std::io::Result<()> {
        if self.failed.is_empty() {
            self.inner.wait()
        } else {
            Ok(())
        }
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for tag in self.failed.drain(..) {
            done(tag, -libc::EIO);
        }
        let writes = &mut self.writes;
        self.inner.reap(&mut |tag, result| {
            let failed = writes.remove(&tag).is_some();
            done(tag, if failed { -libc::EIO } else { result });
        });
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.inner.completion_fd()
    }
}

#[test]
fn a_failed_write_leaves_no_cached_copy() {
    for reaches_file in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = image(dir.path(), "f.raw", 1 << 20, 3);
        let inner = FailingDisk {
            inner: FileDisk::open(&path, false, true).unwrap(),
            reaches_file,
        };
        let disk = CachedDisk::open(Arc::new(inner), &path, 1 << 20, "fail").unwrap();
        let mut e = disk.engine(options()).unwrap();
        let old = read(e.as_mut(), 65536, 2 * BLOCK);
        let new = pattern(4, 2 * BLOCK);
        assert_eq!(write(e.as_mut(), 65536, &new), -libc::EIO);
        // Whatever the failed write left on the file is what a read returns: no cached copy
        // of either the old or the new data claims otherwise.
        let on_file = std::fs::read(&path).unwrap()[65536..65536 + 2 * BLOCK].to_vec();
        assert!(on_file == if reaches_file { new } else { old });
        assert!(
            read(e.as_mut(), 65536, 2 * BLOCK) == on_file,
            "reaches_file={reaches_file}"
        );
    }
}

#[test]
fn the_cache_never_exceeds_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "s.raw", 16 << 20, 5);
    let disk = cached(&path, 1 << 20, "size");
    let footprint = disk.footprint();
    // Blocks and their index together stay within cache=.
    assert!(
        footprint.slots * (footprint.block_size + 128) <= 1 << 20,
        "{footprint:?}"
    );
    let mut e = disk.engine(options()).unwrap();
    let mut x = 5u64;
    for i in 0..3000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = if i % 2 == 0 {
            (x >> 33) % 4000 * 4096
        } else {
            i * 4096
        };
        read(e.as_mut(), offset, 8192);
        assert!(disk.footprint().resident <= footprint.slots);
    }
    assert!(disk.stats().evictions > 0);
}

#[test]
fn disks_on_one_file_share_a_cache_and_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "shared.raw", 2 << 20, 6);
    let other = image(dir.path(), "other.raw", 2 << 20, 6);
    let a = cached(&path, 1 << 20, "a");
    let b = cached(&path, 1 << 20, "b");
    assert!(a.shares_cache_with(&b));
    assert!(!a.shares_cache_with(&cached(&other, 1 << 20, "c")));
    let mut ea = a.engine(options()).unwrap();
    let mut eb = b.engine(options()).unwrap();
    let old = read(ea.as_mut(), 0, 16 * BLOCK);
    // b hits what a brought in.
    assert!(read(eb.as_mut(), 0, 16 * BLOCK) == old);
    assert_eq!(b.stats().hits, 1);
    let new = pattern(7, 4 * BLOCK);
    assert_eq!(
        write(eb.as_mut(), 4 * BLOCK as u64, &new),
        i32::try_from(new.len()).unwrap()
    );
    let back = read(ea.as_mut(), 0, 16 * BLOCK);
    assert!(back[4 * BLOCK..8 * BLOCK] == new[..] && back[..4 * BLOCK] == old[..4 * BLOCK]);
}

#[test]
fn a_scan_does_not_flush_the_hot_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "scan.raw", 32 << 20, 8);
    let disk = cached(&path, 1 << 20, "scan");
    let mut e = disk.engine(options()).unwrap();
    let hot: Vec<u64> = (0..60).map(|i| i * 7 * 4096).collect();
    for _ in 0..3 {
        for &offset in &hot {
            read(e.as_mut(), offset, BLOCK);
        }
    }
    // One pass over 16 MiB, 16 times the cache.
    for i in 0..4096u64 {
        read(e.as_mut(), (8 << 20) + i * 4096, BLOCK);
    }
    let before = disk.stats();
    for &offset in &hot {
        read(e.as_mut(), offset, BLOCK);
    }
    let (hits, _) = delta(disk.stats(), before);
    assert!(hits >= 55, "only {hits} of 60 hot blocks survived the scan");
}

#[test]
fn sequential_reads_are_read_ahead_and_random_ones_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "ra.raw", 8 << 20, 9);
    let expect = pattern(9, 8 << 20);
    let disk = cached(&path, 4 << 20, "ra");
    let mut e = disk.engine(options()).unwrap();
    let mut x = 3u64;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (x >> 33) % 1000 * 4096;
        assert!(read(e.as_mut(), offset, BLOCK) == expect[offset as usize..][..BLOCK]);
    }
    assert_eq!(
        disk.stats().readahead_bytes,
        0,
        "random reads were read ahead"
    );
    for i in 0..512u64 {
        let offset = (4 << 20) + i * 4096;
        assert!(read(e.as_mut(), offset, BLOCK) == expect[offset as usize..][..BLOCK]);
    }
    let stats = disk.stats();
    assert!(
        stats.readahead_bytes > 0 && stats.readahead_hits > 256,
        "{stats}"
    );
}

#[test]
fn daemon_disks_share_a_cache_and_report_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "base.raw", 8 << 20, 10);
    let sockets = [dir.path().join("vm1.sock"), dir.path().join("vm2.sock")];
    let log = dir.path().join("vbmq.log");
    let mut serve = Serve::new().log(&log);
    // A read-only disk and a writable one on one image.
    for (socket, extra) in sockets.iter().zip([",readonly=on", ""]) {
        serve = serve.disk(&disk_spec::with(
            socket,
            &path,
            &format!(",cache=2M,queues=2{extra}"),
        ));
    }
    let daemon = serve.start();
    let mut vm1 = Client::connect_with(&sockets[0], 2, false, true).unwrap();
    let mut vm2 = Client::connect(&sockets[1], 2, false).unwrap();
    let (ret, old) = vm1.read(0, 1 << 20, 64 << 10);
    assert_eq!(ret, 0);
    assert!(old == pattern(10, 8 << 20)[1 << 20..(1 << 20) + (64 << 10)]);
    let (ret, again) = vm2.read(1, 1 << 20, 64 << 10);
    assert_eq!(ret, 0);
    assert!(again == old);
    let new = pattern(11, 8192);
    assert_eq!(vm2.write(0, (1 << 20) + 4096, &new), 0);
    let (ret, back) = vm1.read(1, 1 << 20, 64 << 10);
    assert_eq!(ret, 0);
    assert!(
        back[4096..4096 + 8192] == new[..],
        "vm1 read stale data after vm2's write"
    );
    // SAFETY: signalling our own child.
    unsafe { libc::kill(daemon.child.id().cast_signed(), libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut text = String::new();
    while !text.contains("vm2.sock") {
        assert!(
            Instant::now() < deadline,
            "no statistics after SIGUSR1: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
        text.clear();
        std::fs::File::open(&log)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
    }
    let line = text.lines().find(|l| l.contains("vm2.sock")).unwrap();
    assert!(
        line.contains("hits=1 ") && line.contains("misses=0 "),
        "{line}"
    );
    drop((vm1, vm2));
    assert!(daemon.terminate().success());
}

/// A `handover=on` disk may hand its image to another process, whose writes a cache here would
/// never see: `cache=` with `handover=on` is refused at start, one line naming both, exit 2.
#[test]
fn cache_with_handover_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "base.raw", 1 << 20, 10);
    let socket = dir.path().join("vm.sock");
    let spec = disk_spec::with(&socket, &path, ",cache=2M,handover=on");
    let stderr = common::serve::exits_2_at_start(&["--disk", &spec]);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--disk cache:") && stderr.contains("handover=on"),
        "{stderr}"
    );
    assert!(!socket.exists());
}

#[test]
fn preload_fills_the_cache_from_the_start_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = image(dir.path(), "p.raw", 4 << 20, 12);
    let expect = pattern(12, 4 << 20);
    let disk = cached(&path, 1 << 20, "preload");
    let loaded = disk.preload(&path).unwrap();
    let footprint = disk.footprint();
    // Full, without reading the whole file, and not a block evicted to get there.
    assert_eq!(footprint.resident, footprint.slots, "{footprint:?}");
    assert!(loaded < 4 << 20 && loaded >= (footprint.slots * BLOCK) as u64);
    assert_eq!(disk.stats().evictions, 0);
    let mut e = disk.engine(options()).unwrap();
    let mut hits = 0;
    for i in 0..64u64 {
        let offset = i * 3 * 4096;
        let before = disk.stats().hits;
        assert!(read(e.as_mut(), offset, BLOCK) == expect[offset as usize..][..BLOCK]);
        hits += disk.stats().hits - before;
    }
    assert!(hits >= 60, "{hits} of 64 preloaded blocks hit");
}
