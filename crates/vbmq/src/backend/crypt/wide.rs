//! The XTS masks on 512-bit words (AVX-512): four blocks' masks per word, advanced by alpha^4.

use aes::Block;

use super::sector::{BLOCKS, CHUNK, next};

/// Whether the CPU has what [`mask`] needs.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
pub use self::x86::mask;

/// Never called: [`available`] is false.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn mask(_: *const u8, _: *mut u8, _: &[Block]) {}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::*;

    /// Each lane's mask (one per 128-bit lane) times alpha^4 in GF(2^128).
    #[target_feature(enable = "avx512f,avx512bw")]
    fn next4(t: __m512i) -> __m512i {
        // The top 4 bits of each 64-bit half: the low half's carry into the high half, the
        // high half's reduced by x^128 = x^7 + x^2 + x + 1 (h times 0x87 in GF(2)).
        let top = _mm512_srli_epi64::<60>(t);
        let carry = _mm512_bslli_epi128::<8>(top);
        let h = _mm512_bsrli_epi128::<8>(top);
        let low = _mm512_ternarylogic_epi64::<0x96>(
            h,
            _mm512_slli_epi64::<1>(h),
            _mm512_slli_epi64::<2>(h),
        );
        let shifted = _mm512_ternarylogic_epi64::<0x96>(
            _mm512_slli_epi64::<4>(t),
            carry,
            _mm512_slli_epi64::<7>(h),
        );
        _mm512_xor_si512(shifted, low)
    }

    /// Writes each block of the sectors at `src` XOR its mask to `dst` (may be `src`), the
    /// sectors' chains of masks advancing side by side so their latencies overlap.
    ///
    /// # Safety
    ///
    /// The CPU has AVX-512 F and BW ([`available`]); `src` is readable and `dst` writable for
    /// `tweaks.len()` (at most [`CHUNK`]) sectors.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn mask(src: *const u8, dst: *mut u8, tweaks: &[Block]) {
        let n = tweaks.len().min(CHUNK);
        let mut chains = [_mm512_setzero_si512(); CHUNK];
        for (c, tweak) in chains.iter_mut().zip(&tweaks[..n]) {
            let t0 = u128::from_le_bytes(tweak.0);
            let t1 = next(t0);
            let t2 = next(t1);
            let first = [t0, t1, t2, next(t2)];
            // SAFETY: `first` is 64 bytes.
            *c = unsafe { _mm512_loadu_si512(first.as_ptr().cast()) };
        }
        let (src, dst) = (src.cast::<__m512i>(), dst.cast::<__m512i>());
        for q in 0..BLOCKS / 4 {
            for (s, c) in chains[..n].iter_mut().enumerate() {
                let i = s * BLOCKS / 4 + q;
                // SAFETY: word q of sector s < n lies in both buffers (the caller's promise).
                unsafe {
                    let word = _mm512_loadu_si512(src.add(i));
                    _mm512_storeu_si512(dst.add(i), _mm512_xor_si512(word, *c));
                }
                *c = next4(*c);
            }
        }
    }
}
