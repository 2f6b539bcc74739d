//! What both XTS paths (`xts`, and `wide` on AVX-512) share: a sector's shape, the sectors
//! done in one call, and the step from one block's mask to the next.

/// Bytes of a sector: the unit with its own tweak.
pub const SECTOR: usize = 512;
/// AES blocks in a sector.
pub const BLOCKS: usize = SECTOR / 16;
/// Sectors encrypted in one call of the `aes` crate.
pub const CHUNK: usize = 8;

/// The mask of the next block: the current one times alpha in GF(2^128).
pub fn next(t: u128) -> u128 {
    (t << 1) ^ if t >> 127 != 0 { 0x87 } else { 0 }
}
