//! QEMU's persistent dirty bitmaps as a qcow2 image stores them (`docs/interop/qcow2.txt`,
//! "Bitmaps extension"): the header extension, the bitmap directory and each bitmap's table,
//! read from an untrusted image and checked as QEMU's `block/qcow2-bitmap.c` checks them, and
//! encoded for writing. Bitmap data: bit `i` of byte `j` is chunk `8 * j + i` of
//! `granularity` bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::host_size;

/// The header extension's type.
pub const EXT_BITMAPS: u32 = 0x2385_2875;
/// Autoclear bit 0: the bitmaps extension is consistent with the image (a program without
/// bitmap support clears it when it writes the image).
pub const AUTOCLEAR_BITMAPS: u64 = 1;
/// The bitmap was open for writing and not stored: it is inconsistent.
pub const FLAG_IN_USE: u32 = 1;
/// The bitmap tracks writes (QEMU's "enabled"); without it, it is frozen.
pub const FLAG_AUTO: u32 = 1 << 1;
const KNOWN_FLAGS: u32 = FLAG_IN_USE | FLAG_AUTO;
/// The only bitmap type: dirty tracking.
const TYPE_DIRTY: u8 = 1;
/// QEMU's limits (`QCOW2_MAX_BITMAPS`, `QCOW2_MAX_BITMAP_DIRECTORY_SIZE`, `BME_*`).
const MAX_BITMAPS: u32 = 65535;
const MAX_DIR_BYTES: u64 = 64 << 20;
const MAX_TABLE_ENTRIES: u64 = 0x800_0000;
const MAX_BITMAP_BYTES: u64 = 0x2000_0000;
const GRANULARITY_BITS: std::ops::RangeInclusive<u8> = 9..=31;
const MAX_NAME: usize = 1023;
/// Bytes of a directory entry before its extra data and name.
const ENTRY_FIXED: usize = 24;
/// Where an entry's flags lie in it.
pub const FLAGS_AT: u64 = 12;
/// A table entry: with offset 0, bit 0 says the cluster's bits are all ones.
const TABLE_ALL_ONES: u64 = 1;
const TABLE_OFFSET: u64 = 0x00ff_ffff_ffff_fe00;
const TABLE_RESERVED: u64 = !(TABLE_OFFSET | TABLE_ALL_ONES);
/// The feature name table extension: optional, dropped if the header cluster has no room.
const EXT_FEATURE_NAMES: u32 = 0x6803_f857;

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_be_bytes)
}

fn be64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

/// The bitmaps extension: where the directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extension {
    pub count: u32,
    pub dir_size: u64,
    pub dir_offset: u64,
}

impl Extension {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        b.extend(self.count.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(self.dir_size.to_be_bytes());
        b.extend(self.dir_offset.to_be_bytes());
        b
    }
}

/// The image's first cluster: the header, its extensions and the backing file's name, which
/// vbmq rewrites whole (as QEMU's `qcow2_update_header` does) to change the bitmaps extension.
pub struct HeaderCluster {
    bytes: Vec<u8>,
    header_length: usize,
    extensions: Vec<(u32, Vec<u8>)>,
    backing_name: Option<Vec<u8>>,
}

impl HeaderCluster {
    /// Reads the first cluster (`cluster` bytes) of the v3 image in `file`.
    pub fn read(file: &File, cluster: u64) -> io::Result<Self> {
        let mut bytes = vec![0; host_size(cluster)];
        file.read_exact_at(&mut bytes, 0)?;
        if be32(&bytes, 4) != 3 {
            return Err(invalid("qcow2 bitmaps need a version 3 image"));
        }
        let header_length = host_size(u64::from(be32(&bytes, 100)));
        if !(104..=bytes.len()).contains(&header_length) || !header_length.is_multiple_of(8) {
            return Err(invalid("qcow2 header length out of range"));
        }
        let mut extensions = Vec::new();
        let mut at = header_length;
        loop {
            let kind = be32(&bytes, at);
            let len = host_size(u64::from(be32(&bytes, at + 4)));
            if at + 8 > bytes.len() {
                return Err(invalid("header extensions run past the first cluster"));
            }
            if kind == 0 {
                break;
            }
            let end = (at + 8)
                .checked_add(len)
                .filter(|end| *end <= bytes.len())
                .ok_or_else(|| invalid("header extension past the first cluster"))?;
            extensions.push((kind, bytes[at + 8..end].to_vec()));
            at = (at + 8) + len.next_multiple_of(8);
        }
        let (offset, len) = (be64(&bytes, 8), host_size(u64::from(be32(&bytes, 16))));
        let backing_name = if offset != 0 && len > 0 {
            let at = host_size(offset);
            let name = at
                .checked_add(len)
                .and_then(|end| bytes.get(at..end))
                .ok_or_else(|| invalid("the backing file's name is not in the first cluster"))?;
            Some(name.to_vec())
        } else {
            None
        };
        Ok(HeaderCluster {
            bytes,
            header_length,
            extensions,
            backing_name,
        })
    }

    /// The bitmaps extension, checked against the file's length and cluster size.
    pub fn bitmaps(&self, file_len: u64, cluster: u64) -> io::Result<Option<Extension>> {
        let Some((_, data)) = self.extensions.iter().find(|(k, _)| *k == EXT_BITMAPS) else {
            return Ok(None);
        };
        if data.len() != 24 || be32(data, 4) != 0 {
            return Err(invalid(
                "bitmaps extension of a bad length or reserved field",
            ));
        }
        let ext = Extension {
            count: be32(data, 0),
            dir_size: be64(data, 8),
            dir_offset: be64(data, 16),
        };
        if !(1..=MAX_BITMAPS).contains(&ext.count) {
            return Err(invalid(format!("{} bitmaps: 1 to 65535 only", ext.count)));
        }
        if ext.dir_size < ENTRY_FIXED as u64 * u64::from(ext.count) || ext.dir_size > MAX_DIR_BYTES
        {
            return Err(invalid("bitmap directory size out of range"));
        }
        if !ext.dir_offset.is_multiple_of(cluster)
            || ext.dir_offset == 0
            || ext.dir_offset.saturating_add(ext.dir_size) > file_len
        {
            return Err(invalid(
                "bitmap directory unaligned or past the end of the file",
            ));
        }
        Ok(Some(ext))
    }

    /// The first cluster with the bitmaps extension `ext` (none: removed) and the autoclear
    /// bit that vouches for it; the backing file's name follows the extensions. Refused if it
    /// does not fit in the cluster even without the feature name table.
    pub fn encode(&self, ext: Option<Extension>) -> io::Result<Vec<u8>> {
        let mut extensions: Vec<(u32, Vec<u8>)> = self
            .extensions
            .iter()
            .filter(|(k, _)| *k != EXT_BITMAPS)
            .cloned()
            .collect();
        if let Some(ext) = ext {
            extensions.push((EXT_BITMAPS, ext.encode()));
        }
        let mut out = self.lay_out(&extensions);
        if out.len() > self.bytes.len() {
            extensions.retain(|(k, _)| *k != EXT_FEATURE_NAMES);
            out = self.lay_out(&extensions);
        }
        if out.len() > self.bytes.len() {
            return Err(invalid(
                "no room for the bitmaps extension in the first cluster",
            ));
        }
        let autoclear =
            be64(&out, 88) & !AUTOCLEAR_BITMAPS | if ext.is_some() { AUTOCLEAR_BITMAPS } else { 0 };
        out[88..96].copy_from_slice(&autoclear.to_be_bytes());
        out.resize(self.bytes.len(), 0);
        Ok(out)
    }

    fn lay_out(&self, extensions: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = self.bytes[..self.header_length].to_vec();
        for (kind, data) in extensions {
            out.extend(kind.to_be_bytes());
            out.extend(u32::try_from(data.len()).unwrap_or(0).to_be_bytes());
            out.extend(data);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        out.extend([0u8; 8]);
        if let Some(name) = &self.backing_name {
            let at = out.len() as u64;
            out[8..16].copy_from_slice(&at.to_be_bytes());
            out.extend(name);
        }
        out
    }
}

/// One bitmap of the directory.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub table_offset: u64,
    pub table_size: u32,
    pub flags: u32,
    pub granularity_bits: u8,
    pub name: String,
    /// Where the entry lies in the directory.
    pub at: u64,
    /// Why vbmq must not change the bitmap (unknown flags, type, extra data), if so.
    pub unsupported: Option<String>,
    /// Its bytes as read, written back as they are when vbmq does not rewrite the bitmap.
    pub raw: Vec<u8>,
}

impl DirEntry {
    /// A new entry for a bitmap vbmq wrote.
    pub fn encode(name: &str, table_offset: u64, table_size: u32, flags: u32, bits: u8) -> Vec<u8> {
        let name = name.as_bytes();
        let mut b = Vec::with_capacity(ENTRY_FIXED + name.len() + 8);
        b.extend(table_offset.to_be_bytes());
        b.extend(table_size.to_be_bytes());
        b.extend(flags.to_be_bytes());
        b.push(TYPE_DIRTY);
        b.push(bits);
        b.extend(u16::try_from(name.len()).unwrap_or(0).to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(name);
        b.resize(b.len().next_multiple_of(8), 0);
        b
    }

    /// Its bytes as read, with `flags` in place of its flags.
    pub fn raw_with_flags(&self, flags: u32) -> Vec<u8> {
        let mut raw = self.raw.clone();
        raw[12..16].copy_from_slice(&flags.to_be_bytes());
        raw
    }

    /// Bytes per bit.
    pub fn granularity(&self) -> u64 {
        1 << self.granularity_bits
    }
}

/// The directory `ext` names, read from `file` and checked: every entry inside it, names
/// unique, tables aligned, inside the file and of the size the image's `size` needs.
pub fn read_directory(
    file: &File,
    ext: Extension,
    size: u64,
    cluster: u64,
    file_len: u64,
) -> io::Result<Vec<DirEntry>> {
    let mut dir = vec![0; host_size(ext.dir_size)];
    file.read_exact_at(&mut dir, ext.dir_offset)?;
    let mut entries: Vec<DirEntry> = Vec::new();
    let mut at = 0usize;
    while at < dir.len() {
        let fixed = dir
            .get(at..at + ENTRY_FIXED)
            .ok_or_else(|| invalid("bitmap directory entry truncated"))?;
        let name_size = usize::from(u16::from_be_bytes([fixed[18], fixed[19]]));
        let extra = host_size(u64::from(be32(fixed, 20)));
        let len = (ENTRY_FIXED + name_size)
            .checked_add(extra)
            .map(|n| n.next_multiple_of(8))
            .filter(|n| at + n <= dir.len())
            .ok_or_else(|| invalid("bitmap directory entry past the directory"))?;
        let raw = dir[at..at + len].to_vec();
        let name_at = ENTRY_FIXED + extra;
        let name = std::str::from_utf8(&raw[name_at..name_at + name_size])
            .map_err(|_| invalid("a bitmap name is not UTF-8"))?
            .to_string();
        if name.is_empty() || name_size > MAX_NAME {
            return Err(invalid("a bitmap name of 0 or more than 1023 bytes"));
        }
        if entries.iter().any(|e| e.name == name) {
            return Err(invalid(format!("bitmap {name:?} named twice")));
        }
        let entry = DirEntry {
            table_offset: be64(&raw, 0),
            table_size: be32(&raw, 8),
            flags: be32(&raw, 12),
            granularity_bits: raw[17],
            at: at as u64,
            unsupported: unsupported(raw[16], be32(&raw, 12), extra),
            name,
            raw,
        };
        check_entry(&entry, size, cluster, file_len)?;
        entries.push(entry);
        at += len;
    }
    if entries.len() != host_size(u64::from(ext.count)) {
        return Err(invalid(
            "the bitmap directory does not hold as many bitmaps as said",
        ));
    }
    Ok(entries)
}

/// What QEMU refuses to change in a bitmap.
fn unsupported(kind: u8, flags: u32, extra: usize) -> Option<String> {
    if kind != TYPE_DIRTY {
        Some(format!("bitmap type {kind} is unknown"))
    } else if flags & !KNOWN_FLAGS != 0 {
        Some(format!("unknown bitmap flags {:#x}", flags & !KNOWN_FLAGS))
    } else if extra != 0 {
        Some("bitmap extra data is not supported".into())
    } else {
        None
    }
}

/// Entries a bitmap of `granularity` over `size` bytes has in its table, and its bytes.
pub fn table_size(size: u64, granularity: u64, cluster: u64) -> (u64, u64) {
    let bytes = size.div_ceil(granularity).div_ceil(8);
    (bytes.div_ceil(cluster), bytes)
}

fn check_entry(e: &DirEntry, size: u64, cluster: u64, file_len: u64) -> io::Result<()> {
    let name = &e.name;
    if !GRANULARITY_BITS.contains(&e.granularity_bits) {
        return Err(invalid(format!(
            "bitmap {name:?}: granularity out of range"
        )));
    }
    let (want, bytes) = table_size(size, e.granularity(), cluster);
    if bytes > MAX_BITMAP_BYTES {
        return Err(invalid(format!("bitmap {name:?}: larger than 512 MiB")));
    }
    let entries = u64::from(e.table_size);
    if entries > MAX_TABLE_ENTRIES || entries != want {
        return Err(invalid(format!(
            "bitmap {name:?}: a table of {entries} entries, not {want}"
        )));
    }
    if !e.table_offset.is_multiple_of(cluster)
        || (entries > 0 && e.table_offset == 0)
        || e.table_offset.saturating_add(entries * 8) > file_len
    {
        return Err(invalid(format!(
            "bitmap {name:?}: table unaligned or past the end of the file"
        )));
    }
    Ok(())
}

/// The table of `entry`, each data cluster checked to lie aligned inside the file.
pub fn read_table(
    file: &File,
    entry: &DirEntry,
    cluster: u64,
    file_len: u64,
) -> io::Result<Vec<u64>> {
    let mut raw = vec![0; host_size(u64::from(entry.table_size) * 8)];
    file.read_exact_at(&mut raw, entry.table_offset)?;
    let table: Vec<u64> = raw.chunks_exact(8).map(|c| be64(c, 0)).collect();
    for &t in &table {
        let offset = t & TABLE_OFFSET;
        let bad = t & TABLE_RESERVED != 0
            || (offset != 0 && t & TABLE_ALL_ONES != 0)
            || !offset.is_multiple_of(cluster)
            || offset.saturating_add(cluster) > file_len;
        if bad {
            return Err(invalid(format!(
                "bitmap {:?}: a bad table entry {t:#x}",
                entry.name
            )));
        }
    }
    Ok(table)
}

/// The data clusters `table` points to.
pub fn data_clusters(table: &[u64]) -> impl Iterator<Item = u64> + '_ {
    table.iter().map(|t| t & TABLE_OFFSET).filter(|&o| o != 0)
}

/// The bits of `entry` (after `read_table`), as little-endian 64-bit words: bit `i` of word
/// `w` is chunk `64 * w + i`.
pub fn read_bits(
    file: &File,
    entry: &DirEntry,
    table: &[u64],
    size: u64,
    cluster: u64,
) -> io::Result<Vec<u64>> {
    let (_, bytes) = table_size(size, entry.granularity(), cluster);
    let mut data = vec![0u8; host_size(bytes.next_multiple_of(8))];
    for (i, &t) in table.iter().enumerate() {
        let from = host_size(i as u64 * cluster);
        let to = host_size(((i as u64 + 1) * cluster).min(bytes));
        let Some(part) = data.get_mut(from..to) else {
            break;
        };
        let offset = t & TABLE_OFFSET;
        if offset != 0 {
            file.read_exact_at(part, offset)?;
        } else if t & TABLE_ALL_ONES != 0 {
            part.fill(0xff);
        }
    }
    let chunks = size.div_ceil(entry.granularity());
    let mut words: Vec<u64> = data
        .chunks_exact(8)
        .map(|c| c.try_into().map_or(0, u64::from_le_bytes))
        .collect();
    // Bits past the end mean nothing (an all-ones cluster sets them).
    if let Some(last) = words.last_mut()
        && !chunks.is_multiple_of(64)
    {
        *last &= (1 << (chunks % 64)) - 1;
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back() {
        let raw = DirEntry::encode("nightly", 0x30000, 1, FLAG_AUTO, 16);
        assert_eq!(raw.len(), 32);
        assert_eq!(be64(&raw, 0), 0x30000);
        assert_eq!(be32(&raw, 12), FLAG_AUTO);
        assert_eq!(unsupported(raw[16], FLAG_AUTO, 0), None);
        assert!(unsupported(1, 4, 0).is_some());
        assert!(unsupported(2, 0, 0).is_some());
        assert!(unsupported(1, 0, 8).is_some());
    }

    /// A directory of `entries` at cluster 1 of a 64 KiB-cluster file of 4 clusters, read
    /// for a 1 GiB image: the error, if any.
    fn directory_error(entries: &[Vec<u8>], count: u32) -> Option<String> {
        let cs = 64 << 10;
        let file = tempfile::tempfile().unwrap();
        let dir: Vec<u8> = entries.concat();
        file.write_all_at(&dir, cs).unwrap();
        file.set_len(4 * cs).unwrap();
        let ext = Extension {
            count,
            dir_size: dir.len() as u64,
            dir_offset: cs,
        };
        read_directory(&file, ext, 1 << 30, cs, 4 * cs)
            .err()
            .map(|e| e.to_string())
    }

    #[test]
    fn a_hostile_directory_is_refused_with_the_reason() {
        let good = |name: &str| DirEntry::encode(name, 2 << 16, 1, FLAG_AUTO, 16);
        assert_eq!(directory_error(&[good("a"), good("b")], 2), None);
        let mut long_name = good("a");
        long_name[18..20].copy_from_slice(&600u16.to_be_bytes());
        let mut big_extra = good("a");
        big_extra[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
        let mut fine_grain = good("a");
        fine_grain[17] = 8;
        let mut wrong_table = good("a");
        wrong_table[8..12].copy_from_slice(&7u32.to_be_bytes());
        let mut unaligned = good("a");
        unaligned[0..8].copy_from_slice(&0x20200u64.to_be_bytes());
        let mut outside = good("a");
        outside[0..8].copy_from_slice(&(1u64 << 40).to_be_bytes());
        let mut not_utf8 = good("a");
        not_utf8[24] = 0xff;
        for (entries, count, why) in [
            (vec![good("a"), good("a")], 2, "named twice"),
            (vec![good("a")], 2, "as many bitmaps"),
            (vec![long_name], 1, "past the directory"),
            (vec![big_extra], 1, "past the directory"),
            (vec![fine_grain], 1, "granularity"),
            (vec![wrong_table], 1, "not 1"),
            (vec![unaligned], 1, "unaligned"),
            (vec![outside], 1, "past the end"),
            (vec![not_utf8], 1, "UTF-8"),
            (vec![good("a")[..20].to_vec()], 1, "truncated"),
        ] {
            let err = directory_error(&entries, count);
            assert!(
                err.as_deref().is_some_and(|e| e.contains(why)),
                "{why}: {err:?}"
            );
        }
    }

    #[test]
    fn table_sizes() {
        // 1 GiB at 64 KiB granularity: 16384 bits, 2048 bytes, one 64 KiB cluster.
        assert_eq!(table_size(1 << 30, 64 << 10, 64 << 10), (1, 2048));
        // 2 MiB at 512 B with 512 B clusters: 4096 bits, 512 bytes, one cluster.
        assert_eq!(table_size(2 << 20, 512, 512), (1, 512));
        assert_eq!(table_size(2 << 20, 512, 256), (2, 512));
    }
}
