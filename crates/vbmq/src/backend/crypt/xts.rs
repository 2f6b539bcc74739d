//! AES-256-XTS (IEEE 1619) over 512-byte sectors, the tweak being the sector's number in
//! little-endian (dm-crypt's `aes-xts-plain64`).
//!
//! Up to 8 sectors (a 4 KiB request) go through AES in one call, so the `aes` crate keeps its
//! pipeline full (AES-NI, or VAES on 4 blocks per instruction where the CPU has it); their 8
//! tweaks are encrypted in one call too. The XOR with each block's mask is fused with the copy
//! between the guest's buffer and the staging buffer, and runs on 512-bit words where the CPU
//! has AVX-512 (`wide`). The tests check both paths against the `xts-mode` crate.

use aes::cipher::{BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};
use aes::{Aes256, Block};

use super::sector::{BLOCKS, CHUNK, SECTOR, next};
use super::wide;

/// The two AES-256 keys of XTS.
pub struct Xts {
    data: Aes256,
    tweak: Aes256,
    /// The CPU has AVX-512 F and BW: masks are applied 4 blocks at a time.
    wide: bool,
}

impl Xts {
    /// From 64 key bytes: the data key, then the tweak key. `None` if `key` is not 64 bytes.
    pub fn new(key: &[u8]) -> Option<Self> {
        if key.len() != 64 {
            return None;
        }
        Some(Xts {
            data: Aes256::new_from_slice(&key[..32]).ok()?,
            tweak: Aes256::new_from_slice(&key[32..]).ok()?,
            wide: wide::available(),
        })
    }

    /// Encrypts `buf` in place (whole sectors; a partial last sector is left as it is), whose
    /// first sector is number `first`.
    pub fn encrypt(&self, buf: &mut [u8], first: u64) {
        let p = buf.as_mut_ptr();
        // SAFETY: source, work area and destination are `buf`.
        unsafe { self.crypt(p, p, p, buf.len(), first, true) }
    }

    /// Decrypts `buf` in place, as [`Xts::encrypt`] encrypted it.
    pub fn decrypt(&self, buf: &mut [u8], first: u64) {
        let p = buf.as_mut_ptr();
        // SAFETY: source, work area and destination are `buf`.
        unsafe { self.crypt(p, p, p, buf.len(), first, false) }
    }

    /// Encrypts the `buf.len()` bytes at `src` into `buf` (whole sectors), reading `src` once.
    ///
    /// # Safety
    ///
    /// `src` is valid for reads of `buf.len()` bytes.
    pub unsafe fn encrypt_from(&self, src: *const u8, buf: &mut [u8], first: u64) {
        let p = buf.as_mut_ptr();
        // SAFETY: the caller's promise for `src`; `buf` is ours.
        unsafe { self.crypt(src, p, p, buf.len(), first, true) }
    }

    /// Decrypts `buf` (which it overwrites) into the `buf.len()` bytes at `dst` (whole sectors),
    /// writing `dst` once.
    ///
    /// # Safety
    ///
    /// `dst` is valid for writes of `buf.len()` bytes.
    pub unsafe fn decrypt_into(&self, buf: &mut [u8], dst: *mut u8, first: u64) {
        let p = buf.as_mut_ptr();
        // SAFETY: the caller's promise for `dst`; `buf` is ours.
        unsafe { self.crypt(p, p, dst, buf.len(), first, false) }
    }

    /// XTS of the whole sectors of `len` bytes: masked from `src` into `work`, through AES in
    /// `work`, masked from `work` into `dst`. `src` and `dst` may be `work`.
    ///
    /// # Safety
    ///
    /// `src` is readable, `work` and `dst` writable for `len` bytes; nothing else touches
    /// `work` meanwhile.
    unsafe fn crypt(
        &self,
        src: *const u8,
        work: *mut u8,
        dst: *mut u8,
        len: usize,
        first: u64,
        encrypt: bool,
    ) {
        let sectors = len / SECTOR;
        let mut done = 0;
        while done < sectors {
            let n = (sectors - done).min(CHUNK);
            let mut tweaks = [Block::default(); CHUNK];
            for (i, t) in tweaks[..n].iter_mut().enumerate() {
                let sector = first.wrapping_add((done + i) as u64);
                *t = Block::from(u128::from(sector).to_le_bytes());
            }
            self.tweak.encrypt_blocks(&mut tweaks[..n]);
            let tweaks = &tweaks[..n];
            let at = done * SECTOR;
            // SAFETY: `at + n * SECTOR <= len`, in every buffer (the caller's promise).
            unsafe {
                let work = work.add(at);
                self.mask(src.add(at), work, tweaks);
                // A block is 16 bytes with alignment 1: the work area as n sectors of blocks.
                let blocks = std::slice::from_raw_parts_mut(work.cast::<Block>(), n * BLOCKS);
                if encrypt {
                    self.data.encrypt_blocks(blocks);
                } else {
                    self.data.decrypt_blocks(blocks);
                }
                self.mask(work, dst.add(at), tweaks);
            }
            done += n;
        }
    }

    /// Writes each block of the sectors at `src` XOR its mask to `dst` (may be `src`).
    ///
    /// # Safety
    ///
    /// `src` is readable and `dst` writable for `tweaks.len()` sectors.
    unsafe fn mask(&self, src: *const u8, dst: *mut u8, tweaks: &[Block]) {
        if self.wide {
            // SAFETY: `wide` is set only where the CPU has AVX-512 F and BW; the pointers are
            // the caller's.
            unsafe { wide::mask(src, dst, tweaks) };
            return;
        }
        for (s, tweak) in tweaks.iter().enumerate() {
            let mut t = u128::from_le_bytes(tweak.0);
            for j in 0..BLOCKS {
                let at = (s * BLOCKS + j) * 16;
                // SAFETY: block j of sector s lies in both (the caller's promise).
                unsafe {
                    let word = src.add(at).cast::<u128>().read_unaligned();
                    dst.add(at)
                        .cast::<u128>()
                        .write_unaligned((u128::from_le(word) ^ t).to_le());
                }
                t = next(t);
            }
        }
    }

    /// Turns the AVX-512 path off (tests of the portable one).
    #[cfg(test)]
    fn narrow(mut self) -> Self {
        self.wide = false;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes08::cipher::KeyInit as _;
    use xts_mode::{Xts128, get_tweak_default};

    #[test]
    fn agrees_with_the_xts_mode_crate() {
        let key: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        let reference = Xts128::new(
            aes08::Aes256::new_from_slice(&key[..32]).unwrap(),
            aes08::Aes256::new_from_slice(&key[32..]).unwrap(),
        );
        // 20 sectors: two full chunks and a partial one.
        let plain: Vec<u8> = (0..20 * SECTOR)
            .map(|i| (i * 7 % 251).to_le_bytes()[0])
            .collect();
        let wide = Xts::new(&key).unwrap();
        eprintln!("AVX-512 path: {}", wide.wide);
        for ours in [wide, Xts::new(&key).unwrap().narrow()] {
            for first in [0u64, 1, 12345, u64::MAX - 20] {
                let mut a = plain.clone();
                let mut b = plain.clone();
                reference.encrypt_area(&mut a, SECTOR, u128::from(first), get_tweak_default);
                ours.encrypt(&mut b, first);
                assert!(a == b, "sector {first}");
                assert!(b != plain);
                ours.decrypt(&mut b, first);
                assert!(b == plain, "sector {first}");
                // From one buffer into another: the same bytes.
                let mut c = vec![0u8; plain.len()];
                // SAFETY: `plain` has `c.len()` bytes.
                unsafe { ours.encrypt_from(plain.as_ptr(), &mut c, first) };
                assert!(a == c, "sector {first}");
                let mut d = vec![0u8; plain.len()];
                // SAFETY: `d` has `c.len()` bytes.
                unsafe { ours.decrypt_into(&mut c, d.as_mut_ptr(), first) };
                assert!(d == plain, "sector {first}");
            }
        }
        assert!(Xts::new(&key[..32]).is_none());
    }
}
