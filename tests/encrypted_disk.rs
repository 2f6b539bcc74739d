//! `encrypt=aes-xts`: what the guest writes reads back, and the image holds none of it in the
//! clear; the key may come through a pipe; another key reads only noise; write-zeroes reads back
//! zeros without zeros in the image; discard is accepted and dropped (or passed down when asked);
//! with `base=` and `cache=` too.

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use common::disk_spec;
use common::{Client, Daemon, pattern, sparse_image};

const SIZE: usize = 4 << 20;

fn spec(dir: &Path, image: &Path, key: &Path, extra: &str) -> String {
    format!(
        "socket={},path={},encrypt=aes-xts,key-file={}{extra}",
        dir.join("e.sock").display(),
        image.display(),
        key.display()
    )
}

/// Whether `needle` occurs anywhere in `hay`.
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Neither the guest's marker nor `plaintext` stands in `stored` (the bytes of `what`).
fn assert_no_plaintext(stored: &[u8], plaintext: &[u8], what: &str) {
    assert!(
        !contains(stored, b"PLAINTEXT-MARKER"),
        "the marker is in {what}"
    );
    assert!(!contains(stored, plaintext), "plaintext is in {what}");
}

/// The guest's data: a text marker repeated, then a pattern, then a sector of zeros.
fn plaintext() -> Vec<u8> {
    let mut data = b"PLAINTEXT-MARKER-".repeat(4096 / 17 + 1);
    data.truncate(4096);
    data.extend(pattern(3, 8192));
    data.extend([0u8; 4096]);
    data
}

#[test]
fn the_image_holds_no_plaintext_and_reads_back_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let image = sparse_image(dir.path(), "secret.raw", SIZE as u64);
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(77, 64)).unwrap();
    let socket = dir.path().join("e.sock");
    let data = plaintext();
    let daemon = Daemon::start(&[spec(dir.path(), &image, &key, "")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.write(0, 1 << 20, &data), 0);
    // Unaligned in memory and across the guest's buffer: the same bytes back.
    assert_eq!(client.write(0, 2 << 20, &data[..1024]), 0);
    let (ret, back) = client.read(0, 1 << 20, data.len());
    assert_eq!(ret, 0);
    assert!(back == data, "what was written does not read back");
    assert_eq!(client.flush(0), 0);
    drop(client);
    assert!(daemon.terminate().success());

    let raw = std::fs::read(&image).unwrap();
    assert_no_plaintext(&raw, &pattern(3, 8192)[..64], "the image");
    let zeros = &raw[(1 << 20) + 12288..(1 << 20) + 16384];
    assert!(
        zeros.iter().any(|b| *b != 0),
        "a zero sector is stored as zeros"
    );
    // Two equal plaintext sectors at different places differ on disk (per-sector tweak).
    assert_ne!(
        raw[(1 << 20)..(1 << 20) + 512],
        raw[(2 << 20)..(2 << 20) + 512]
    );

    // The key through a pipe: it never rests on a disk.
    let fifo = dir.path().join("key.fifo");
    let name = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, pattern(77, 64)).unwrap())
    };
    let daemon = Daemon::start(&[spec(dir.path(), &image, &fifo, ",cache=1M")]);
    writer.join().unwrap();
    let mut client = Client::connect(&socket, 1, false).unwrap();
    // The second read is a hit of the cache, which holds plaintext.
    for _ in 0..2 {
        let (ret, back) = client.read(0, 1 << 20, data.len());
        assert_eq!(ret, 0);
        assert!(
            back == data,
            "the key from a pipe does not read the data back"
        );
    }
    drop(client);
    assert!(daemon.terminate().success());

    // Another key reads noise.
    std::fs::write(&key, pattern(78, 64)).unwrap();
    let daemon = Daemon::start(&[spec(dir.path(), &image, &key, "")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let (ret, back) = client.read(0, 1 << 20, data.len());
    assert_eq!(ret, 0);
    assert!(
        !contains(&back, b"PLAINTEXT-MARKER"),
        "another key read the data"
    );
    drop(client);
    assert!(daemon.terminate().success());

    // A key of the wrong size is refused at start.
    std::fs::write(&key, [1u8; 32]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--disk", &spec(dir.path(), &image, &key, "")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("64 bytes"), "{err}");
}

/// Whether `raw` holds an aligned 16-byte run of zeros: what a hole or zeros in the clear would
/// leave (ciphertext has one with probability 2^-128 per block).
fn has_zero_block(raw: &[u8]) -> bool {
    raw.chunks_exact(16).any(|b| b.iter().all(|x| *x == 0))
}

/// Write-zeroes over 1 MiB + 8 KiB (two pieces) from an unaligned start, with and without
/// unmap: zeros read back, the data around is intact, and the image holds ciphertext there, not
/// zeros or a hole. Discard is accepted and dropped (the range keeps its data), unless
/// `encrypt-discard=on` passes it to the image.
#[test]
fn write_zeroes_leave_ciphertext_and_discard_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let image = sparse_image(dir.path(), "secret.raw", SIZE as u64);
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(21, 64)).unwrap();
    let socket = dir.path().join("e.sock");
    let data = pattern(8, 3 << 20);
    let daemon = Daemon::start(&[spec(dir.path(), &image, &key, "")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.write(0, 0, &data), 0);
    let (zero_at, zero_len) = ((1 << 20) + 4096, (1 << 20) + 8192);
    assert_eq!(client.write_zeroes(0, zero_at, zero_len, true), 0);
    assert_eq!(client.write_zeroes(0, 2560, 512, false), 0);
    assert_eq!(client.flush(0), 0);
    let (ret, back) = client.read(0, 0, data.len());
    assert_eq!(ret, 0);
    let mut expected = data.clone();
    let zeroed = host(zero_at)..host(zero_at + zero_len);
    expected[zeroed.clone()].fill(0);
    expected[2560..3072].fill(0);
    assert!(back == expected, "write-zeroes did not read back as zeros");
    // Dropped: the range reads back its old data.
    assert_eq!(client.discard(0, 0, 4096), 0);
    client.assert_reads(
        0,
        0,
        &expected[..4096],
        "a dropped discard changed the data",
    );
    drop(client);
    assert!(daemon.terminate().success());
    let raw = std::fs::read(&image).unwrap();
    assert!(
        !has_zero_block(&raw[zeroed.clone()]),
        "the image shows the zeroed range"
    );
    assert!(!has_zero_block(&raw[2560..3072]));
    assert!(
        !has_zero_block(&raw[..4096]),
        "the discard reached the image"
    );

    // Asked for: the discard reaches the image, which then shows the range unused.
    let daemon = Daemon::start(&[spec(dir.path(), &image, &key, ",encrypt-discard=on")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.discard(0, 0, 65536), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let raw = std::fs::read(&image).unwrap();
    assert!(
        raw[..65536].iter().all(|b| *b == 0),
        "the discard was dropped"
    );
}

fn host(n: u64) -> usize {
    usize::try_from(n).unwrap()
}

/// Every composition, `cache=` and `base=` with and without each other: what was written, then
/// zeroed, reads back, before and after a restart; a dropped discard changes nothing; the base
/// never changes.
#[test]
fn encrypted_disk_with_cache_and_base_reads_back_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(33, 64)).unwrap();
    let base = dir.path().join("golden.raw");
    // The base's ciphertext: any bytes (they decrypt to the base's plaintext).
    std::fs::write(&base, pattern(34, SIZE)).unwrap();
    let socket = dir.path().join("e.sock");
    let base_arg = format!(",base={}", base.display());
    for (n, extra) in ["", ",cache=1M", &base_arg, &format!("{base_arg},cache=1M")]
        .into_iter()
        .enumerate()
    {
        let name = format!("disk{n}.raw");
        let image = dir.path().join(&name);
        if extra.is_empty() || extra == ",cache=1M" {
            sparse_image(dir.path(), &name, SIZE as u64);
        }
        let daemon = Daemon::start(&[spec(dir.path(), &image, &key, extra)]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        let (ret, mut expected) = client.read(0, 0, 1 << 20);
        assert_eq!(ret, 0);
        let data = pattern(35 + n as u64, 300 * 1024);
        assert_eq!(client.write(0, 8192, &data), 0, "{extra}");
        expected[8192..8192 + data.len()].copy_from_slice(&data);
        // Read twice: with cache=, the second read is a hit.
        for _ in 0..2 {
            let (ret, back) = client.read(0, 0, expected.len());
            assert_eq!(ret, 0);
            assert!(back == expected, "{extra}: the write does not read back");
        }
        // Zeros over part of the write and part of what was there.
        assert_eq!(client.write_zeroes(0, 200 * 1024, 400 * 1024, true), 0);
        expected[200 * 1024..600 * 1024].fill(0);
        assert_eq!(client.discard(0, 0, 1 << 20), 0);
        for _ in 0..2 {
            let (ret, back) = client.read(0, 0, expected.len());
            assert_eq!(ret, 0);
            assert!(back == expected, "{extra}: write-zeroes does not read back");
        }
        assert_eq!(client.flush(0), 0);
        drop(client);
        assert!(daemon.terminate().success());
        let daemon = Daemon::start(&[spec(dir.path(), &image, &key, extra)]);
        let mut client = Client::connect(&socket, 1, false).unwrap();
        client.assert_reads(0, 0, &expected, &format!("{extra}: lost at restart"));
        drop(client);
        assert!(daemon.terminate().success());
    }
    assert!(
        std::fs::read(&base).unwrap() == pattern(34, SIZE),
        "the base changed"
    );
}

/// `len` bytes of the client's memory region from `at`, as iovecs of `cuts` bytes each (the rest
/// in a last one), a gap of 512 bytes between them: sectors straddle segments.
fn segments(client: &Client, at: usize, len: usize, cuts: &[usize]) -> Vec<blkio::iovec> {
    let mut iovecs = Vec::new();
    let (mut addr, mut left) = (client.region.addr + at, len);
    for &cut in cuts.iter().chain([&len]) {
        let n = cut.min(left);
        iovecs.push(blkio::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: n,
        });
        addr += n + 512;
        left -= n;
        if left == 0 {
            break;
        }
    }
    iovecs
}

/// Waits for the one request queued on queue 0; its result.
fn complete(client: &mut Client) -> i32 {
    let mut done = [std::mem::MaybeUninit::<blkio::Completion>::uninit(); 1];
    let mut timeout = std::time::Duration::from_secs(20);
    let n = client.queues[0]
        .do_io(&mut done, 1, Some(&mut timeout), None)
        .unwrap();
    assert_eq!(n, 1, "request timed out");
    // SAFETY: do_io initialised `n` completions.
    unsafe { done[0].assume_init_ref() }.ret
}

/// The image is exactly the `aes-xts-plain64` ciphertext (the `xts-mode` crate's) of what the
/// guest wrote, from one buffer or from segments cutting sectors in two; reads into such
/// segments give the plaintext back.
#[test]
fn the_image_is_aes_xts_plain64_of_what_was_written() {
    use aes08::cipher::KeyInit;
    let dir = tempfile::tempdir().unwrap();
    let image = sparse_image(dir.path(), "disk.raw", SIZE as u64);
    let key = dir.path().join("key");
    let key_bytes = pattern(21, 64);
    std::fs::write(&key, &key_bytes).unwrap();
    let daemon = Daemon::start(&[spec(dir.path(), &image, &key, "")]);
    let mut client = Client::connect(&dir.path().join("e.sock"), 1, false).unwrap();
    let data = pattern(8, 64 << 10);
    let (one, split) = (1u64 << 20, 2u64 << 20);
    assert_eq!(client.write(0, one, &data), 0);
    // The same data from segments of 700, 1300 and 100 bytes, then the rest.
    let cuts = [700, 1300, 100];
    let iov = segments(&client, 0, data.len(), &cuts);
    let mut from = 0;
    for v in &iov {
        // SAFETY: each segment lies in the region; `data` has its bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(data[from..].as_ptr(), v.iov_base.cast(), v.iov_len)
        };
        from += v.iov_len;
    }
    let count = u32::try_from(iov.len()).unwrap();
    client.queues[0].writev(split, iov.as_ptr(), count, 0, blkio::ReqFlags::empty());
    assert_eq!(complete(&mut client), 0);
    // Read back into segments of other cuts.
    let iov = segments(&client, 1 << 20, data.len(), &[300, 4000, 1500, 12]);
    let count = u32::try_from(iov.len()).unwrap();
    client.queues[0].readv(split, iov.as_ptr(), count, 0, blkio::ReqFlags::empty());
    assert_eq!(complete(&mut client), 0);
    let back: Vec<u8> = iov
        .iter()
        // SAFETY: each segment lies in the region.
        .flat_map(|v| unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) })
        .copied()
        .collect();
    assert!(
        back == data,
        "a read into segments does not give back what was written"
    );
    drop(client);
    assert!(daemon.terminate().success());

    let reference = xts_mode::Xts128::new(
        aes08::Aes256::new_from_slice(&key_bytes[..32]).unwrap(),
        aes08::Aes256::new_from_slice(&key_bytes[32..]).unwrap(),
    );
    let raw = std::fs::read(&image).unwrap();
    for at in [one, split] {
        let mut expected = data.clone();
        let first = u128::from(at / 512);
        reference.encrypt_area(&mut expected, 512, first, xts_mode::get_tweak_default);
        let start = usize::try_from(at).unwrap();
        assert!(
            raw[start..start + data.len()] == expected[..],
            "the image at {at} is not the aes-xts-plain64 ciphertext"
        );
    }
}

/// Not a test: an encrypted disk against the same disk unencrypted, 4 KiB random I/O at QD32,
/// one queue on CPU 1 (`VBMQ_CRYPT_CPU`), 256 MiB image in /dev/shm, 3 rounds of 2 s
/// (`VBMQ_CRYPT_SECS`), with vbmq's CPU time per I/O. Run in release:
/// `cargo test --release --test encrypted_disk crypt_speed -- --ignored --nocapture`.
#[test]
#[ignore]
fn crypt_speed_against_the_plain_disk() {
    const BENCH_SIZE: usize = 256 << 20;
    let (secs, cpu) = common::speed_settings("CRYPT", 2.0);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let image = dir.path().join("disk.raw");
    common::large_image(&image, BENCH_SIZE, 11);
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(5, 64)).unwrap();
    let socket = dir.path().join("e.sock");
    for round in 0..3 {
        for write in [false, true] {
            for encrypted in [false, true] {
                let crypt = if encrypted {
                    format!(",encrypt=aes-xts,key-file={}", key.display())
                } else {
                    String::new()
                };
                let _ = std::fs::remove_file(&socket);
                let spec =
                    disk_spec::with(&socket, &image, &format!("{crypt},queues=1,cpus={cpu}"));
                let daemon = Daemon::start(&[spec]);
                let span = (BENCH_SIZE as u64, secs, None);
                let (iops, cpu_per_mio) = common::speed(daemon, &socket, write, span);
                eprintln!(
                    "round {round} {} {}: {iops:.0} IOPS, {cpu_per_mio:.1} CPU s per 10^6 I/O",
                    if write { "randwrite" } else { "randread" },
                    if encrypted { "encrypted" } else { "plain" },
                );
            }
        }
    }
    eprintln!(
        "nproc {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}

/// A base image encrypted with the disk's key: a thin encrypted disk over it reads the base's
/// plaintext, and neither file holds what the guest wrote in the clear.
#[test]
fn an_encrypted_thin_disk_over_an_encrypted_base() {
    let dir = tempfile::tempdir().unwrap();
    let base = sparse_image(dir.path(), "golden.raw", SIZE as u64);
    let key = dir.path().join("key");
    std::fs::write(&key, pattern(9, 64)).unwrap();
    let socket = dir.path().join("e.sock");
    let golden = pattern(4, 65536);
    // The golden image, written through an encrypted disk.
    let daemon = Daemon::start(&[spec(dir.path(), &base, &key, "")]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    assert_eq!(client.write(0, 0, &golden), 0);
    drop(client);
    assert!(daemon.terminate().success());
    let base_bytes = std::fs::read(&base).unwrap();

    let disk = dir.path().join("vm.raw");
    let thin = format!(",base={}", base.display());
    let daemon = Daemon::start(&[spec(dir.path(), &disk, &key, &thin)]);
    let mut client = Client::connect(&socket, 1, false).unwrap();
    let (ret, back) = client.read(0, 0, golden.len());
    assert_eq!(ret, 0);
    assert!(back == golden, "the base's plaintext");
    let data = plaintext();
    // Into the middle of the base's first block: the rest of the block is copied (ciphertext).
    assert_eq!(client.write(0, 8192, &data), 0);
    let (ret, back) = client.read(0, 0, golden.len());
    assert_eq!(ret, 0);
    let mut expected = golden.clone();
    expected[8192..8192 + data.len()].copy_from_slice(&data);
    assert!(back == expected, "the guest's write over the base");
    drop(client);
    assert!(daemon.terminate().success());
    let raw = std::fs::read(&disk).unwrap();
    assert_no_plaintext(&raw, &golden[..64], "DISK");
    assert!(
        std::fs::read(&base).unwrap() == base_bytes,
        "the base changed"
    );
}
