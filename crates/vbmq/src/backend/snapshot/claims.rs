//! Claims on blocks to save, taken without waiting: a queue's engine never spins on a block
//! another thread saves (that thread may be waiting for this queue's own save), it tries again
//! later.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::host_size;

/// A block's word and bit.
pub(super) fn bit(block: u64) -> (usize, u64) {
    (host_size(block / 64), 1 << (block % 64))
}

/// What [`claim_unsettled`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// The caller now holds these runs of adjacent blocks (first block, count), none of which
    /// was settled: it saves each and lets its claim go. Empty: nothing to save.
    Runs(Vec<(u64, u64)>),
    /// Another thread holds a block of the range that is not settled yet: nothing was
    /// claimed; try again once it lets go.
    Busy,
}

/// Claims every block of `[first, end)` that is not set in `settled`, as runs of adjacent
/// blocks; all or nothing.
pub(super) fn claim_unsettled(
    settled: &[AtomicU64],
    claimed: &[AtomicU64],
    first: u64,
    end: u64,
) -> Claimed {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for block in first..end {
        let (word, bit) = bit(block);
        let (Some(done), Some(claims)) = (settled.get(word), claimed.get(word)) else {
            break;
        };
        if done.load(Ordering::Acquire) & bit != 0 {
            continue;
        }
        if claims.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
            for &(first, count) in &runs {
                let_go(claimed, first, count);
            }
            return Claimed::Busy;
        }
        // Settled meanwhile by the thread that held it just before.
        if done.load(Ordering::Acquire) & bit != 0 {
            claims.fetch_and(!bit, Ordering::AcqRel);
            continue;
        }
        match runs.last_mut() {
            Some((start, count)) if *start + *count == block => *count += 1,
            _ => runs.push((block, 1)),
        }
    }
    Claimed::Runs(runs)
}

/// Sets the bits of the `count` blocks from `first` in `bits`.
pub(super) fn set_run(bits: &[AtomicU64], first: u64, count: u64) {
    for block in first..first + count {
        let (word, bit) = bit(block);
        if let Some(w) = bits.get(word) {
            w.fetch_or(bit, Ordering::AcqRel);
        }
    }
}

/// Lets go the claims of the `count` blocks from `first`.
pub(super) fn let_go(claimed: &[AtomicU64], first: u64, count: u64) {
    for block in first..first + count {
        let (word, bit) = bit(block);
        if let Some(w) = claimed.get(word) {
            w.fetch_and(!bit, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn runs_skip_settled_blocks_and_a_foreign_claim_takes_nothing() {
        let (settled, claimed) = (words(2), words(2));
        set_run(&settled, 3, 1);
        assert_eq!(
            claim_unsettled(&settled, &claimed, 1, 70),
            Claimed::Runs(vec![(1, 2), (4, 66)])
        );
        let_go(&claimed, 1, 2);
        // Blocks 4.. are held: a claim of 0..6 takes nothing, not even 0..3.
        assert_eq!(claim_unsettled(&settled, &claimed, 0, 6), Claimed::Busy);
        assert_eq!(
            claim_unsettled(&settled, &claimed, 0, 3),
            Claimed::Runs(vec![(0, 3)])
        );
    }
}
