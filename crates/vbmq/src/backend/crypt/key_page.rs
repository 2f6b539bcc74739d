//! The key's one place in memory: a mapping of its own, locked (`mlock`: never written to swap)
//! and left out of core dumps (`MADV_DONTDUMP`). The key file is read straight into it, the two
//! AES key schedules are built beside it, then the key bytes and the stack the loading thread
//! used are wiped. At the disk's close the schedules wipe themselves (the `aes` crate's
//! `zeroize` feature) and the whole mapping is wiped before it is unmapped.

use std::io;
use std::mem::MaybeUninit;
use std::ops::Deref;
use std::ptr::NonNull;

use zeroize::Zeroize;

use super::KEY_LEN;
use super::xts::Xts;

/// What the mapping holds.
struct Material {
    raw: [u8; KEY_LEN],
    xts: MaybeUninit<Xts>,
}

/// The locked, undumped mapping; wiped and unmapped on drop (what it holds is not dropped).
struct Mapping {
    page: NonNull<Material>,
    len: usize,
}

impl Mapping {
    fn new() -> io::Result<Self> {
        // SAFETY: sysconf has no memory arguments.
        let page_size =
            usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let len = size_of::<Material>().next_multiple_of(page_size.max(1));
        // SAFETY: a new private anonymous mapping; the result is checked.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(page) = NonNull::new(addr.cast::<Material>()) else {
            return Err(io::Error::other("mmap gave a null mapping"));
        };
        let mapping = Mapping { page, len };
        // SAFETY: madvise and mlock on the mapping made above, of `len` bytes.
        if unsafe { libc::madvise(addr, len, libc::MADV_DONTDUMP) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        if unsafe { libc::mlock(addr, len) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("cannot lock the key's page in memory (RLIMIT_MEMLOCK): {e}"),
            ));
        }
        // SAFETY: the mapping is page-aligned (more than `Material`'s alignment), at least
        // `size_of::<Material>()` bytes, and ours alone.
        unsafe {
            page.as_ptr().write(Material {
                raw: [0; KEY_LEN],
                xts: MaybeUninit::uninit(),
            });
        }
        Ok(mapping)
    }

    fn material(&mut self) -> &mut Material {
        // SAFETY: `new` wrote a `Material` there; `&mut self` makes this the only reference.
        unsafe { &mut *self.page.as_ptr() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the `len` bytes of the mapping are ours; nothing refers into them any more.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(self.page.as_ptr().cast::<u8>(), self.len) };
        bytes.zeroize();
        // SAFETY: unmaps the mapping `new` made (which unlocks it).
        unsafe { libc::munmap(self.page.as_ptr().cast(), self.len) };
    }
}

/// The key's ciphers, in their locked page: see the module.
pub struct KeyPage(Mapping);

// SAFETY: the mapping belongs to this value alone, and `Xts` (two AES ciphers and a flag) is
// `Send` and `Sync`: the page is only read once loaded.
unsafe impl Send for KeyPage {}
// SAFETY: as above.
unsafe impl Sync for KeyPage {}

impl KeyPage {
    /// Reads the key into a new locked page with `read` (which fills the 64 bytes it is given,
    /// or fails) and builds its ciphers there.
    pub fn load(read: impl FnOnce(&mut [u8; KEY_LEN]) -> io::Result<()>) -> io::Result<Self> {
        let mut mapping = Mapping::new()?;
        let material = mapping.material();
        let built = read(&mut material.raw).map(|()| Xts::new(&material.raw));
        material.raw.zeroize();
        wipe_stack();
        let xts = built?.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad key"))?;
        material.xts.write(xts);
        wipe_stack();
        Ok(KeyPage(mapping))
    }
}

impl Deref for KeyPage {
    type Target = Xts;

    fn deref(&self) -> &Xts {
        // SAFETY: a `KeyPage` exists only once `load` wrote its `Xts`; the page lives as long
        // as `self`.
        unsafe { (*self.0.page.as_ptr()).xts.assume_init_ref() }
    }
}

impl Drop for KeyPage {
    fn drop(&mut self) {
        // SAFETY: written by `load`, dropped once, here (the ciphers wipe their schedules).
        unsafe { self.0.material().xts.assume_init_drop() };
    }
}

/// Overwrites the stack below the caller with zeros: where the key schedules were built by
/// value before they were moved into the page.
#[inline(never)]
fn wipe_stack() {
    let mut scratch = [0u8; 16 << 10];
    scratch.zeroize();
    std::hint::black_box(&scratch);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` of the mapping that holds `addr`, from `/proc/self/smaps`.
    fn flags_at(addr: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or_default();
            if let Some((start, end)) = first.split_once('-')
                && let (Ok(start), Ok(end)) = (
                    usize::from_str_radix(start, 16),
                    usize::from_str_radix(end, 16),
                )
            {
                inside = (start..end).contains(&addr);
            } else if inside && let Some(flags) = line.strip_prefix("VmFlags:") {
                return flags.split_whitespace().map(String::from).collect();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn the_key_is_in_a_locked_page_left_out_of_core_dumps_and_encrypts_as_its_bytes_do() {
        let key: Vec<u8> = (0..=63u8).collect();
        let page = KeyPage::load(|raw| {
            raw.copy_from_slice(&key);
            Ok(())
        })
        .unwrap();
        let flags = flags_at(page.0.page.as_ptr() as usize);
        assert!(
            flags.iter().any(|f| f == "dd"),
            "not left out of dumps: {flags:?}"
        );
        assert!(flags.iter().any(|f| f == "lo"), "not locked: {flags:?}");
        // SAFETY: reads the raw key bytes of the live page, wiped after the load.
        let raw = unsafe { (*page.0.page.as_ptr()).raw };
        assert_eq!(raw, [0u8; KEY_LEN], "the key bytes outlived the load");
        let (mut a, mut b) = (vec![7u8; 4096], vec![7u8; 4096]);
        page.encrypt(&mut a, 3);
        Xts::new(&key).unwrap().encrypt(&mut b, 3);
        assert_eq!(a, b);
        assert!(KeyPage::load(|_| Err(io::Error::other("no key"))).is_err());
    }
}
