//! The file `DISK.changes`: a 4096-byte header, then one bitmap per named map.
//!
//! Header (little-endian): magic `VBMQCHGS` (0..8), version (8..12), state (12..16: 1 in use,
//! 2 clean), block size (16..24), capacity (24..32), number of maps (32..36), checksum of the
//! bitmaps (40..48, clean only), the image's modification time at the clean close (48..64),
//! the header's own checksum (64..72, computed with this field zero), then from byte 128 one
//! 80-byte entry per map: name length, why it is invalid (0: valid), 6 zero bytes, the name
//! (64 bytes). Bitmap `k` (of the `k`-th entry) lies at `4096 + k * bitmap_bytes`: one bit per
//! block, little-endian 64-bit words (bit `i` of word `w` is block `64 * w + i`). The bitmaps
//! are written only at a clean close; while vbmq serves, the file says "in use" and its
//! bitmaps are not to be trusted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::host_size;

const MAGIC: &[u8; 8] = b"VBMQCHGS";
const VERSION: u32 = 1;
/// Bytes before the first bitmap.
pub const HEADER: u64 = 4096;
/// The state of a file vbmq is serving from: its bitmaps are stale.
pub const IN_USE: u32 = 1;
/// The state of a file vbmq closed: its bitmaps are whole.
pub const CLEAN: u32 = 2;
/// Named maps a disk keeps at most.
pub const MAX_MAPS: usize = 16;
/// Bytes of a name at most.
pub const NAME_MAX: usize = 64;
const ENTRIES_AT: usize = 128;
const ENTRY_LEN: usize = 80;
const SUM_AT: usize = 64;

/// Why a map cannot be trusted (0 in the file: it can).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The file was still "in use" at start: vbmq was killed or crashed.
    Unclean = 1,
    /// The bitmaps do not match their checksum: a torn or damaged file.
    Damaged = 2,
    /// The image was modified while vbmq was not serving it.
    ImageChanged = 3,
    /// The disk's capacity or the map's block size is not what the file records.
    Geometry = 4,
    /// (A qcow2 image's bitmap) the image marks it in use: its writer, QEMU or vbmq, did not
    /// stop cleanly.
    InUse = 5,
}

impl Invalid {
    fn from_code(code: u8) -> Option<Option<Invalid>> {
        Some(match code {
            0 => None,
            1 => Some(Invalid::Unclean),
            2 => Some(Invalid::Damaged),
            3 => Some(Invalid::ImageChanged),
            4 => Some(Invalid::Geometry),
            5 => Some(Invalid::InUse),
            _ => return None,
        })
    }

    /// What happened, after "since NAME" is said.
    pub fn reason(self) -> &'static str {
        match self {
            Invalid::Unclean => "vbmq did not stop cleanly",
            Invalid::Damaged => "its file DISK.changes was damaged",
            Invalid::ImageChanged => "the image was modified while vbmq was not serving it",
            Invalid::Geometry => "the disk's size or the map's block size changed",
            Invalid::InUse => "the image marks its bitmap in use (its writer did not stop cleanly)",
        }
    }
}

/// One named map as the header records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// Why it cannot be trusted, if it cannot.
    pub invalid: Option<Invalid>,
}

/// The header, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// [`IN_USE`] or [`CLEAN`].
    pub state: u32,
    /// Bytes per block.
    pub block_size: u64,
    /// The disk's capacity in bytes.
    pub capacity: u64,
    /// The maps, in the order of their bitmaps.
    pub entries: Vec<Entry>,
    /// [`checksum`] of the bitmaps (clean only).
    pub bitmaps_sum: u64,
    /// The image's modification time (seconds, nanoseconds) at the clean close.
    pub image_mtime: (i64, i64),
}

/// Whether `name` may name a map: 1 to 64 of `[A-Za-z0-9._-]`.
pub fn valid_name(name: &str) -> bool {
    (1..=NAME_MAX).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A 64-bit checksum of `bytes` (FNV-1a over 64-bit words, rotated): any one changed word
/// changes it.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut sum = 0xcbf2_9ce4_8422_2325u64;
    for chunk in bytes.chunks(8) {
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        sum = (sum ^ u64::from_le_bytes(word))
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(29);
    }
    sum ^ bytes.len() as u64
}

fn field(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn half(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

impl Header {
    /// The header's 4096 bytes, its checksum filled in.
    pub fn encode(&self) -> Vec<u8> {
        let mut raw = vec![0u8; host_size(HEADER)];
        raw[..8].copy_from_slice(MAGIC);
        raw[8..12].copy_from_slice(&VERSION.to_le_bytes());
        raw[12..16].copy_from_slice(&self.state.to_le_bytes());
        raw[16..24].copy_from_slice(&self.block_size.to_le_bytes());
        raw[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        let count = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        raw[32..36].copy_from_slice(&count.to_le_bytes());
        raw[40..48].copy_from_slice(&self.bitmaps_sum.to_le_bytes());
        raw[48..56].copy_from_slice(&self.image_mtime.0.to_le_bytes());
        raw[56..64].copy_from_slice(&self.image_mtime.1.to_le_bytes());
        for (k, entry) in self.entries.iter().take(MAX_MAPS).enumerate() {
            let at = ENTRIES_AT + k * ENTRY_LEN;
            let name = entry.name.as_bytes();
            let len = name.len().min(NAME_MAX);
            raw[at] = u8::try_from(len).unwrap_or(0);
            raw[at + 1] = entry.invalid.map_or(0, |why| why as u8);
            raw[at + 8..at + 8 + len].copy_from_slice(&name[..len]);
        }
        let sum = checksum(&raw);
        raw[SUM_AT..SUM_AT + 8].copy_from_slice(&sum.to_le_bytes());
        raw
    }

    /// Reads a header; the error says what is wrong with it (the file is untrusted input).
    pub fn decode(raw: &[u8]) -> Result<Header, String> {
        if raw.len() < host_size(HEADER) {
            return Err(format!("{} bytes: shorter than its header", raw.len()));
        }
        let raw = &raw[..host_size(HEADER)];
        if &raw[..8] != MAGIC {
            return Err("not a vbmq changed-block map".into());
        }
        if half(raw, 8) != VERSION {
            return Err(format!("version {}, not {VERSION}", half(raw, 8)));
        }
        let mut zeroed = raw.to_vec();
        zeroed[SUM_AT..SUM_AT + 8].fill(0);
        if checksum(&zeroed) != field(raw, SUM_AT) {
            return Err("its header does not match its checksum (torn or damaged)".into());
        }
        let state = half(raw, 12);
        if state != IN_USE && state != CLEAN {
            return Err(format!("unknown state {state}"));
        }
        let count = host_size(u64::from(half(raw, 32)));
        if count > MAX_MAPS {
            return Err(format!("{count} maps, more than {MAX_MAPS}"));
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(count);
        for k in 0..count {
            let at = ENTRIES_AT + k * ENTRY_LEN;
            let len = usize::from(raw[at]);
            let invalid = Invalid::from_code(raw[at + 1])
                .ok_or_else(|| format!("map {k}: unknown state {}", raw[at + 1]))?;
            let name = std::str::from_utf8(&raw[at + 8..at + 8 + len.min(NAME_MAX)])
                .ok()
                .filter(|name| name.len() == len && valid_name(name))
                .ok_or_else(|| format!("map {k}: a bad name"))?;
            if entries.iter().any(|e| e.name == name) {
                return Err(format!("the name {name:?} twice"));
            }
            entries.push(Entry {
                name: name.to_string(),
                invalid,
            });
        }
        Ok(Header {
            state,
            block_size: field(raw, 16),
            capacity: field(raw, 24),
            entries,
            bitmaps_sum: field(raw, 40),
            image_mtime: (field(raw, 48).cast_signed(), field(raw, 56).cast_signed()),
        })
    }
}

/// Reads `file` (at `path`) at start: the header to start from, its maps invalid where the
/// file cannot vouch for them (still "in use", damaged, another geometry, the image's time not
/// `image_mtime`), and the bitmaps of a clean file. A header that cannot be read is said in the
/// log and replaced by an empty one.
pub fn load(
    file: &File,
    path: &Path,
    image_mtime: Option<(i64, i64)>,
    capacity: u64,
    asked: Option<u64>,
) -> (Header, Vec<u8>) {
    let fresh = Header {
        state: IN_USE,
        block_size: asked.unwrap_or(64 << 10),
        capacity,
        entries: Vec::new(),
        bitmaps_sum: 0,
        image_mtime: (0, 0),
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        return (fresh, Vec::new());
    }
    let mut raw = vec![0u8; host_size(HEADER)];
    let decoded = file
        .read_exact_at(&mut raw, 0)
        .map_err(|e| format!("cannot read its header: {e}"))
        .and_then(|()| Header::decode(&raw));
    let mut header = match decoded {
        Ok(header) => header,
        Err(e) => {
            tracing::error!(
                "{}: {e}: its checkpoints are lost; starting a new map file",
                path.display()
            );
            return (fresh, Vec::new());
        }
    };
    let bs = header.block_size;
    let geometry_ok = bs.is_power_of_two()
        && (4096..=(16 << 20)).contains(&bs)
        && asked.is_none_or(|asked| asked == bs)
        && header.capacity == capacity;
    let mut why = None;
    let mut bitmaps = Vec::new();
    if !geometry_ok {
        why = Some(Invalid::Geometry);
    } else if header.state != CLEAN {
        why = Some(Invalid::Unclean);
    } else if image_mtime != Some(header.image_mtime) {
        why = Some(Invalid::ImageChanged);
    } else {
        let bytes = capacity.div_ceil(bs).div_ceil(64) * 8;
        let total = bytes * header.entries.len() as u64;
        bitmaps = vec![0u8; host_size(total)];
        let read = file.read_exact_at(&mut bitmaps, HEADER);
        if read.is_err() || len != HEADER + total || checksum(&bitmaps) != header.bitmaps_sum {
            why = Some(Invalid::Damaged);
        }
    }
    if let Some(why) = why {
        let mut said = false;
        for entry in header.entries.iter_mut().filter(|e| e.invalid.is_none()) {
            entry.invalid = Some(why);
            said = true;
        }
        if said {
            tracing::warn!(
                "{}: every checkpoint is now invalid: {}",
                path.display(),
                why.reason()
            );
        }
        bitmaps.clear();
    }
    if !geometry_ok {
        header.block_size = asked.unwrap_or(64 << 10);
        header.capacity = capacity;
    }
    (header, bitmaps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            state: CLEAN,
            block_size: 64 << 10,
            capacity: 1 << 30,
            entries: vec![
                Entry {
                    name: "a".into(),
                    invalid: None,
                },
                Entry {
                    name: "nightly-2026.11.26_x".into(),
                    invalid: Some(Invalid::Unclean),
                },
            ],
            bitmaps_sum: 42,
            image_mtime: (1_700_000_000, 123),
        }
    }

    #[test]
    fn a_header_reads_back() {
        assert_eq!(Header::decode(&header().encode()), Ok(header()));
    }

    #[test]
    fn a_damaged_or_short_header_is_refused_with_the_reason() {
        let raw = header().encode();
        for at in [0, 9, 13, 20, 33, 130, 200, 4000] {
            let mut bad = raw.clone();
            bad[at] ^= 0x10;
            assert!(Header::decode(&bad).is_err(), "byte {at}");
        }
        assert!(Header::decode(&raw[..100]).is_err());
        assert!(Header::decode(&[]).is_err());
    }

    #[test]
    fn names() {
        assert!(valid_name("a") && valid_name("backup-2026.11.26_01"));
        assert!(valid_name(&"x".repeat(64)));
        for bad in ["", "a b", "a/b", "é", "a\0", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn one_changed_word_changes_the_checksum() {
        let zeros = vec![0u8; 4096];
        let base = checksum(&zeros);
        for at in [0, 7, 8, 4095] {
            let mut one = zeros.clone();
            one[at] = 0x80;
            assert_ne!(checksum(&one), base, "byte {at}");
        }
        assert_ne!(checksum(&zeros[..4088]), base);
    }
}
