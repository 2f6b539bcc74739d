//! Generation-stamped blocks and the check that a snapshot of them is one instant, shared by
//! tests/snapshot.rs and tests/guest_snapshot.rs (`#[path]`-included by each; the guest's
//! writer, tests/guest/stamp_writer.c, writes in the same order).
#![allow(dead_code)]

use std::path::Path;

/// Bytes of a stamped block: (block number, generation) repeated.
pub const BLOCK: usize = 4096;

pub fn stamp(block: u64, generation: u64) -> Vec<u8> {
    let mut pair = [0u8; 16];
    pair[..8].copy_from_slice(&block.to_le_bytes());
    pair[8..].copy_from_slice(&generation.to_le_bytes());
    pair.repeat(BLOCK / 16)
}

/// An image of `blocks` blocks, each stamped with generation 0.
pub fn stamped_image(path: &Path, blocks: u64) {
    let bytes: Vec<u8> = (0..blocks).flat_map(|b| stamp(b, 0)).collect();
    std::fs::write(path, bytes).unwrap();
}

/// The writer's order within a generation: the first block, the last, the second, the one
/// before the last... so that, once the snapshot's copy (from the first block on) has passed
/// the writer's low blocks, each write to a low block is followed by one to a high block the
/// copy has not reached: without copy-before-write, the later write would be in the snapshot
/// and the earlier not, which no instant explains. `blocks` is even.
pub fn order(blocks: u64, step: u64) -> u64 {
    if step.is_multiple_of(2) {
        step / 2
    } else {
        blocks - 1 - step / 2
    }
}

/// The rank of the write of `generation` to `block`; the first of generation 1 is `blocks`
/// (generation 0 is the image).
pub fn rank(blocks: u64, generation: u64, block: u64) -> u64 {
    let step = if block < blocks / 2 {
        2 * block
    } else {
        2 * (blocks - 1 - block) + 1
    };
    generation * blocks + step
}

/// Checks that `file` is the disk at one instant: some number `k` of writes started (between
/// `low` and `high`) such that every block holds the last write of rank below `k` to it, or,
/// for the write of rank `k - 1` (in flight at the instant), the one before. Returns `k`'s
/// range.
pub fn check_one_instant(file: &Path, blocks: u64, low: u64, high: u64) -> (u64, u64) {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(bytes.len() as u64, blocks * BLOCK as u64, "snapshot size");
    let (mut from, mut to) = (low, high);
    let mut culprit = None;
    for (block, data) in (0..blocks).zip(bytes.chunks_exact(BLOCK)) {
        let pair = |at: usize| {
            let number = u64::from_le_bytes(data[at..at + 8].try_into().unwrap());
            let generation = u64::from_le_bytes(data[at + 8..at + 16].try_into().unwrap());
            (number, generation)
        };
        let stamps: Vec<(u64, u64)> = (0..BLOCK / 16).map(|i| pair(i * 16)).collect();
        assert!(
            stamps.iter().all(|(n, _)| *n == block),
            "block {block} holds another block's stamp"
        );
        let oldest = stamps.iter().map(|(_, g)| *g).min().unwrap_or(0);
        let newest = stamps.iter().map(|(_, g)| *g).max().unwrap_or(0);
        // Holding generation g: its write started (k > rank), the next had not landed.
        let lower = rank(blocks, oldest, block) + 1;
        let upper = rank(blocks, newest + 1, block) + 1;
        if lower > from {
            from = lower;
            culprit = Some((block, oldest, newest, "lower"));
        }
        if upper < to {
            to = upper;
            culprit = Some((block, oldest, newest, "upper"));
        }
        assert!(
            from <= to,
            "no single instant explains the snapshot: block {block} holds generation \
             {oldest}..={newest} (rank window now {from}..={to}, writes started {low}..={high}; \
             last bound from {culprit:?})"
        );
    }
    (from, to)
}
