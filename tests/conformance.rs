//! The storage conformance suite: one set of checks written against the `Disk`/`Engine` traits
//! and run against every engine (null, file with and without O_DIRECT, mem, cached file), then the
//! same checks through the real daemon driven by libblkio.

#[cfg(feature = "ceph-tests")]
mod ceph;
mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, Daemon, image, pattern};
use vbmq::backend::{
    CachedDisk, Disk, Engine, EngineOptions, FileDisk, IoOp, IovList, MemoryDisk, NullDisk,
};

const CAPACITY: u64 = 8 << 20;
const SEED: u64 = 7;

/// One engine under test and what it promises.
struct Case {
    name: &'static str,
    disk: Arc<dyn Disk>,
    /// Reads return what was written (false for the null device).
    stores: bool,
    /// The disk's initial contents are `pattern(SEED)` (false: zeros).
    seeded: bool,
}

fn cases(dir: &Path) -> Vec<Case> {
    let file = |name: &str| image(dir, name, CAPACITY as usize, SEED);
    let cached = |name: &str, cache: u64| -> Arc<dyn Disk> {
        let inner = FileDisk::open(&file(name), false, true).unwrap();
        Arc::new(CachedDisk::open(Arc::new(inner), &dir.join(name), cache, name).unwrap())
    };
    vec![
        Case {
            name: "null",
            disk: Arc::new(NullDisk::new(CAPACITY)),
            stores: false,
            seeded: false,
        },
        Case {
            name: "file direct",
            disk: Arc::new(FileDisk::open(&file("direct.raw"), false, true).unwrap()),
            stores: true,
            seeded: true,
        },
        Case {
            name: "file through the ring",
            disk: Arc::new(
                FileDisk::open(&file("ring.raw"), false, true)
                    .unwrap()
                    .ring_only(),
            ),
            stores: true,
            seeded: true,
        },
        Case {
            name: "file through the ring, SQPOLL",
            disk: Arc::new(
                FileDisk::open(&file("sqpoll.raw"), false, true)
                    .unwrap()
                    .ring_only()
                    .sqpoll(0)
                    .unwrap(),
            ),
            stores: true,
            seeded: true,
        },
        Case {
            name: "file buffered",
            disk: Arc::new(FileDisk::open(&file("buffered.raw"), false, false).unwrap()),
            stores: true,
            seeded: true,
        },
        Case {
            name: "mem",
            disk: Arc::new(MemoryDisk::new(CAPACITY).unwrap()),
            stores: true,
            seeded: false,
        },
        Case {
            name: "mem image",
            disk: Arc::new(MemoryDisk::load(CAPACITY, &file("image.raw")).unwrap()),
            stores: true,
            seeded: true,
        },
        Case {
            name: "cached file",
            disk: cached("cached.raw", 4 << 20),
            stores: true,
            seeded: true,
        },
        Case {
            name: "cached file, tiny cache",
            disk: cached("tiny.raw", 64 << 10),
            stores: true,
            seeded: true,
        },
        #[cfg(feature = "ceph-tests")]
        Case {
            name: "rbd",
            disk: rbd_disk(),
            stores: true,
            seeded: false,
        },
    ]
}

/// A new image on the binary's shared single-node Ceph cluster.
#[cfg(feature = "ceph-tests")]
fn rbd_disk() -> Arc<dyn Disk> {
    let name = ceph::unique_image_name("conformance");
    let conf = ceph::with_shared(|cluster| {
        cluster.create_image(&name, CAPACITY);
        cluster.conf().to_path_buf()
    });
    let target = vbmq::backend::RbdTarget {
        pool: "rbd".into(),
        namespace: String::new(),
        image: name,
        conf,
        user: "admin".into(),
        timeout: Duration::from_secs(30),
    };
    let disk = vbmq::backend::RbdDisk::open(&target, false).unwrap();
    // The library keeps each cluster connection for the process's life (`vbmq serve` lets go
    // of them at exit). The disk holds its own: let the library's go, so the connection ends
    // with the disk, before this process exits (librados aborts on a connection left open then).
    vbmq::backend::release_clusters();
    Arc::new(disk)
}

fn engine(disk: &Arc<dyn Disk>) -> Box<dyn Engine> {
    disk.engine(EngineOptions {
        depth: 128,
        batch: true,
        notify: false,
    })
    .unwrap()
}

/// Guest-like buffers: each transfer split into uneven iovecs, none of them aligned.
struct Buffers {
    bufs: Vec<Vec<u8>>,
    iovecs: Vec<Vec<libc::iovec>>,
}

impl Buffers {
    fn new() -> Self {
        Buffers {
            bufs: Vec::new(),
            iovecs: Vec::new(),
        }
    }

    /// A buffer holding `data`, split into up to three iovecs; returns (iov, count).
    fn add(&mut self, data: Vec<u8>) -> IovList {
        let len = data.len();
        // One spare byte in front so the buffer is not aligned.
        let mut buf = vec![0u8; len + 1];
        buf[1..].copy_from_slice(&data);
        let cuts = [0, len / 3, len / 3 + (len / 3).min(17), len];
        let base = buf[1..].as_mut_ptr();
        let iovecs: Vec<libc::iovec> = cuts
            .windows(2)
            .filter(|w| w[1] > w[0])
            .map(|w| libc::iovec {
                // SAFETY: w[0] < len: inside the buffer.
                iov_base: unsafe { base.add(w[0]) }.cast(),
                iov_len: w[1] - w[0],
            })
            .collect();
        self.bufs.push(buf);
        self.iovecs.push(iovecs);
        let last = self.iovecs.last().unwrap();
        // SAFETY: the iovecs and their buffers live in `self` until the test drops it, after
        // every operation on them has completed.
        unsafe { IovList::new(last.as_ptr(), last.len() as u32) }
    }

    fn data(&self, i: usize) -> &[u8] {
        &self.bufs[i][1..]
    }
}

/// Pushes `ops` (tag, op), submits them in one batch and returns every result by tag.
fn execute(engine: &mut dyn Engine, ops: &[(u64, IoOp)]) -> HashMap<u64, i32> {
    for (tag, op) in ops {
        engine.push(*op, *tag).unwrap();
    }
    engine.submit().unwrap();
    let mut results = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        engine.reap(&mut |tag, result| {
            assert!(results.insert(tag, result).is_none(), "tag {tag} twice");
        });
        if results.len() >= ops.len() {
            break;
        }
        assert!(Instant::now() < deadline, "operations never completed");
        engine.wait().unwrap();
    }
    assert_eq!(results.len(), ops.len());
    results
}

fn write(engine: &mut dyn Engine, offset: u64, data: &[u8]) -> i32 {
    let mut bufs = Buffers::new();
    let iov = bufs.add(data.to_vec());
    execute(engine, &[(1, IoOp::Write { offset, iov })])[&1]
}

fn read(engine: &mut dyn Engine, offset: u64, len: usize) -> Vec<u8> {
    let mut bufs = Buffers::new();
    let iov = bufs.add(vec![0xee; len]);
    let results = execute(engine, &[(9, IoOp::Read { offset, iov })]);
    assert_eq!(results[&9], i32::try_from(len).unwrap(), "read result");
    bufs.data(0).to_vec()
}

/// What a case should read at `[offset, offset + len)` of a disk never written.
fn initial(case: &Case, offset: u64, len: usize) -> Vec<u8> {
    if case.seeded && case.stores {
        pattern(SEED, CAPACITY as usize)[offset as usize..offset as usize + len].to_vec()
    } else {
        vec![0; len]
    }
}

fn for_each_case(check: impl Fn(&Case)) {
    let dir = tempfile::tempdir().unwrap();
    for case in cases(dir.path()) {
        eprintln!("case: {}", case.name);
        check(&case);
    }
}

#[test]
fn geometry_is_the_capacity() {
    for_each_case(|case| {
        let geometry = case.disk.geometry();
        assert_eq!(geometry.capacity, CAPACITY, "{}", case.name);
        assert_eq!(geometry.block_size, 512, "{}", case.name);
    });
}

#[test]
fn batched_writes_read_back() {
    for_each_case(|case| {
        let mut e = engine(&case.disk);
        let spots: [(u64, usize); 5] = [
            (0, 512),
            (4096, 4096),
            (3 * 512, 8192),
            (1 << 20, 128 << 10),
            (CAPACITY - 1024, 1024),
        ];
        // The unaligned writes overlap the aligned one: the later op in the batch is not
        // ordered after the earlier, so they go in separate batches.
        for (i, (offset, len)) in spots.iter().enumerate() {
            let data = pattern(100 + i as u64, *len);
            assert_eq!(
                write(e.as_mut(), *offset, &data),
                i32::try_from(*len).unwrap(),
                "{}",
                case.name
            );
        }
        let mut bufs = Buffers::new();
        let ops: Vec<(u64, IoOp)> = spots
            .iter()
            .enumerate()
            .map(|(i, (offset, len))| {
                let iov = bufs.add(vec![0xee; *len]);
                (
                    i as u64,
                    IoOp::Read {
                        offset: *offset,
                        iov,
                    },
                )
            })
            .collect();
        let results = execute(e.as_mut(), &ops);
        for (i, (_, len)) in spots.iter().enumerate() {
            assert_eq!(
                results[&(i as u64)],
                i32::try_from(*len).unwrap(),
                "{}: read {i}",
                case.name
            );
        }
        // Spot 2 overlaps spot 1: spot 1 keeps what spot 2 did not overwrite.
        let expect = |i: usize| -> Vec<u8> {
            let (offset, len) = spots[i];
            if !case.stores {
                return vec![0; len];
            }
            let mut disk = initial(case, 0, CAPACITY as usize);
            for (j, (o, l)) in spots.iter().enumerate() {
                disk[*o as usize..*o as usize + l].copy_from_slice(&pattern(100 + j as u64, *l));
            }
            disk[offset as usize..offset as usize + len].to_vec()
        };
        for i in 0..spots.len() {
            assert!(bufs.data(i) == expect(i), "{}: data of read {i}", case.name);
        }
    });
}

#[test]
fn another_engine_reads_what_one_wrote() {
    for_each_case(|case| {
        let mut a = engine(&case.disk);
        let mut b = engine(&case.disk);
        let offset = 2 << 20;
        // b caches the old contents first, then a overwrites them.
        let before = read(b.as_mut(), offset, 64 << 10);
        assert!(before == initial(case, offset, 64 << 10), "{}", case.name);
        let data = pattern(200, 64 << 10);
        assert_eq!(write(a.as_mut(), offset, &data), 64 << 10);
        let back = read(b.as_mut(), offset, 64 << 10);
        if case.stores {
            assert!(back == data, "{}: b read stale data", case.name);
        }
        drop((a, b));
        // A new engine (a reconnection) sees it too.
        let mut c = engine(&case.disk);
        if case.stores {
            assert!(read(c.as_mut(), offset, 64 << 10) == data, "{}", case.name);
        }
    });
}

#[test]
fn discard_and_write_zeroes_read_back_zeros() {
    for_each_case(|case| {
        let mut e = engine(&case.disk);
        let data = pattern(300, 1 << 20);
        assert_eq!(write(e.as_mut(), 1 << 20, &data), 1 << 20);
        // Fill the cache, if any, with the written data.
        assert!(read(e.as_mut(), 1 << 20, 1 << 20) == data || !case.stores);
        let ops = [
            (
                1,
                IoOp::Discard {
                    offset: (1 << 20) + 4096,
                    len: 8192,
                },
            ),
            (
                2,
                IoOp::WriteZeroes {
                    offset: (1 << 20) + 65536,
                    len: 1536,
                    unmap: false,
                },
            ),
            (
                3,
                IoOp::WriteZeroes {
                    offset: (1 << 20) + 131072,
                    len: 262144,
                    unmap: true,
                },
            ),
        ];
        let results = execute(e.as_mut(), &ops);
        assert!(
            results.values().all(|r| *r == 0),
            "{}: {results:?}",
            case.name
        );
        let back = read(e.as_mut(), 1 << 20, 1 << 20);
        let mut expect = data.clone();
        for (start, len) in [(4096, 8192), (65536, 1536), (131072, 262144)] {
            expect[start..start + len].fill(0);
        }
        if !case.stores {
            expect.fill(0);
        }
        assert!(back == expect, "{}: zeroed ranges", case.name);
    });
}

/// A read or write with no data buffer moves nothing and completes with 0 bytes.
#[test]
fn empty_read_and_write_complete_with_zero_bytes() {
    for_each_case(|case| {
        let mut e = engine(&case.disk);
        let mut bufs = Buffers::new();
        let (r, w) = (bufs.add(Vec::new()), bufs.add(Vec::new()));
        let ops = [
            (
                1,
                IoOp::Read {
                    offset: 4096,
                    iov: r,
                },
            ),
            (
                2,
                IoOp::Write {
                    offset: 4096,
                    iov: w,
                },
            ),
        ];
        let results = execute(e.as_mut(), &ops);
        assert_eq!((results[&1], results[&2]), (0, 0), "{}", case.name);
    });
}

#[test]
fn many_in_flight_complete_once_by_tag() {
    for_each_case(|case| {
        let mut e = engine(&case.disk);
        let mut bufs = Buffers::new();
        let ops: Vec<(u64, IoOp)> = (0..100u64)
            .map(|i| {
                let offset = (i * 37 % 2000) * 4096;
                let iov = bufs.add(vec![0xee; 4096]);
                (1000 + i, IoOp::Read { offset, iov })
            })
            .chain([(5000, IoOp::Flush)])
            .collect();
        let results = execute(e.as_mut(), &ops);
        for (tag, op) in &ops {
            let expect = if matches!(op, IoOp::Flush) { 0 } else { 4096 };
            assert_eq!(results[tag], expect, "{}: tag {tag}", case.name);
        }
        for (i, (_, op)) in ops.iter().take(100).enumerate() {
            let IoOp::Read { offset, .. } = op else {
                unreachable!()
            };
            assert!(
                bufs.data(i) == initial(case, *offset, 4096),
                "{}: read {i}",
                case.name
            );
        }
    });
}

#[test]
fn flush_succeeds() {
    for_each_case(|case| {
        let mut e = engine(&case.disk);
        assert_eq!(write(e.as_mut(), 0, &pattern(1, 4096)), 4096);
        assert_eq!(
            execute(e.as_mut(), &[(3, IoOp::Flush)])[&3],
            0,
            "{}",
            case.name
        );
    });
}

/// The same checks through `vbmq serve` and a libblkio client, two queues each.
#[test]
fn daemon_conformance() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| {
        image(dir.path(), name, CAPACITY as usize, SEED)
            .display()
            .to_string()
    };
    let storages = [
        ("null", "null=8M".to_string(), false, false),
        ("file", format!("path={}", file("d.raw")), true, true),
        (
            "file buffered",
            format!("path={},direct=off", file("b.raw")),
            true,
            true,
        ),
        (
            "file ring sqpoll",
            format!("path={},io=ring,sqpoll=0", file("s.raw")),
            true,
            true,
        ),
        (
            "file ring fixed buffers",
            format!("path={},io=ring,fixed-buffers=on", file("f.raw")),
            true,
            true,
        ),
        ("mem", "mem=8M".to_string(), true, false),
        (
            "mem image",
            format!("mem=8M,image={}", file("i.raw")),
            true,
            true,
        ),
        (
            "cached",
            format!("path={},cache=4M", file("c.raw")),
            true,
            true,
        ),
    ];
    #[cfg(feature = "ceph-tests")]
    let storages = {
        let image = ceph::unique_image_name("daemon");
        let rbd = ceph::with_shared(|cluster| {
            cluster.create_image(&image, CAPACITY);
            cluster.disk(&image)
        });
        let mut all = storages.to_vec();
        all.push(("rbd", rbd, true, false));
        all
    };
    for (name, storage, stores, seeded) in storages {
        eprintln!("case: {name}");
        let socket = dir.path().join(format!("{}.sock", name.replace(' ', "-")));
        let spec = format!("socket={},{storage},queues=2", socket.display());
        let daemon = Daemon::start(&[spec]);
        let mut client = Client::connect(&socket, 2, false).unwrap();
        assert_eq!(client.capacity(), CAPACITY, "{name}");
        let initial = |offset: usize, len: usize| {
            if stores && seeded {
                pattern(SEED, CAPACITY as usize)[offset..offset + len].to_vec()
            } else {
                vec![0; len]
            }
        };
        // Read on one queue (filling any cache), write on the other, read again.
        let (ret, before) = client.read(1, 1 << 20, 256 << 10);
        assert_eq!(ret, 0, "{name}");
        assert!(
            before == initial(1 << 20, 256 << 10),
            "{name}: initial data"
        );
        let data = pattern(400, 256 << 10);
        assert_eq!(client.write(0, 1 << 20, &data), 0, "{name}");
        let (ret, back) = client.read(1, 1 << 20, 256 << 10);
        assert_eq!(ret, 0, "{name}");
        let expect = if stores {
            data.clone()
        } else {
            vec![0; data.len()]
        };
        assert!(back == expect, "{name}: queue 1 read stale data");
        assert_eq!(client.discard(1, (1 << 20) + 4096, 8192), 0, "{name}");
        assert_eq!(
            client.write_zeroes(0, (1 << 20) + 65536, 4096, false),
            0,
            "{name}"
        );
        let (ret, back) = client.read(0, 1 << 20, 256 << 10);
        assert_eq!(ret, 0, "{name}");
        let mut expect = expect;
        expect[4096..4096 + 8192].fill(0);
        expect[65536..65536 + 4096].fill(0);
        assert!(back == expect, "{name}: zeroed ranges");
        assert_eq!(client.flush(0), 0, "{name}");
        drop(client);
        assert!(daemon.terminate().success(), "{name}: exit status");
    }
}
