//! The fuzz targets' bodies and oracles under `cargo test`: every saved input in
//! `fuzz/regressions/<target>/` (crashes once found, kept as regressions) and in the small corpus
//! `fuzz/seeds/<target>/`, then a fixed-seed stream of inputs. libFuzzer explores; this replays.

use std::path::Path;

use vbmq::test_utils::fuzz::{fs_requests, queue_requests, request_parse, vhost_user_messages};

/// xorshift64*: the same stream on every run.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn input(&mut self, max_len: usize) -> Vec<u8> {
        let len = (self.next() as usize) % max_len;
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// The saved inputs for `target`, in name order.
fn saved(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files: Vec<_> = ["regressions", "seeds"]
        .iter()
        .filter_map(|dir| std::fs::read_dir(root.join(dir).join(target)).ok())
        .flatten()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

fn replay(target: &str, run: fn(&[u8]), seed: u64, count: usize, max_len: usize) {
    let saved = saved(target);
    for input in &saved {
        run(input);
    }
    let mut stream = Stream(seed);
    for _ in 0..count {
        run(&stream.input(max_len));
    }
    eprintln!("{target}: {} saved inputs, {count} generated", saved.len());
}

#[test]
fn fs_requests_oracle() {
    replay("fs_requests", fs_requests, 0x5eed_0004, 300, 4096);
}

#[test]
fn queue_requests_oracle() {
    replay("queue_requests", queue_requests, 0x5eed_0001, 2000, 4096);
}

#[test]
fn vhost_user_messages_oracle() {
    replay(
        "vhost_user_messages",
        vhost_user_messages,
        0x5eed_0002,
        100,
        2048,
    );
}

#[test]
fn request_parse_oracle() {
    replay("request_parse", request_parse, 0x5eed_0003, 5000, 2048);
}
