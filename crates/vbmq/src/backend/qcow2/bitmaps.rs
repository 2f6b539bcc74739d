//! `track-changes=on` on a qcow2 disk: its checkpoints are the image's persistent dirty
//! bitmaps, as QEMU keeps them (`block/qcow2-bitmap.c`), so `qemu-img info` lists them and
//! `qemu-img bitmap` merges them, and a disk QEMU left with bitmaps keeps them.
//!
//! - At open: the image's enabled (`auto`) bitmaps become checkpoints (their bits brought to
//!   the disk's block size: a bit of another granularity marks every block it touches, so a
//!   checkpoint never lacks a changed block), then are marked `in_use` in the image and the
//!   autoclear bit that vouches for them is set, flushed, before any write is served. A bitmap
//!   already `in_use` (a crash left it) is an invalid checkpoint. Frozen (disabled) bitmaps
//!   are left as they are; enabled ones vbmq cannot name (or past 16) are marked `in_use`.
//!   Unknown flags, types or extra data refuse the disk (QEMU refuses such images too).
//! - While open: the bits live in memory only (see `changes`).
//! - At a clean close: each valid checkpoint is written anew (data clusters, table, a new
//!   directory), flushed, then the header names the new directory without `in_use`, flushed;
//!   only then the old clusters are freed. A crash at any point leaves the old directory, its
//!   bitmaps `in_use`: invalid, never wrong.
//! - A checkpoint begun or forgotten reaches the image at the clean close (as QEMU stores a
//!   new persistent bitmap at close): after a crash a new one is gone, a forgotten one is back
//!   as invalid.
//! - Bitmaps a program without bitmap support left (autoclear bit clear) are dropped, as QEMU
//!   drops them (their clusters leak).

use std::collections::HashSet;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use super::bitmap_dir::{
    AUTOCLEAR_BITMAPS, DirEntry, Extension, FLAG_AUTO, FLAG_IN_USE, FLAGS_AT, HeaderCluster,
    data_clusters, read_bits, read_directory, read_table, table_size,
};
use super::header::OFFSET_AUTOCLEAR;
use super::image::Qcow2Image;
use super::write::Writer;
use crate::backend::changes::{ImageBitmaps, ImageMap, ImageMaps, Invalid, MAX_MAPS, valid_name};
use crate::host_size;

/// Block size when neither `track-block=` nor a bitmap of the image says one.
const DEFAULT_BLOCK: u64 = 64 << 10;
/// Block sizes a checkpoint may have (`track-block=`).
const BLOCKS: std::ops::RangeInclusive<u64> = 4096..=(16 << 20);

/// What a bitmap of the image is to vbmq.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A checkpoint.
    Checkpoint,
    /// Disabled: no write changes it; left as it is.
    Frozen,
    /// Enabled but not a checkpoint (a name vbmq cannot serve, or past 16): `in_use`.
    Foreign,
}

/// A bitmap the image held at open.
struct Held {
    entry: DirEntry,
    /// Its table, if it could be read (its clusters are freed when it is dropped).
    table: Option<Vec<u64>>,
    kind: Kind,
}

/// The image's bitmaps as read at open, until the clean close replaces them.
#[derive(Default)]
struct Loaded {
    held: Vec<Held>,
    dir: Option<Extension>,
}

/// A writable qcow2 image keeping a tracked disk's checkpoints.
pub struct Qcow2Bitmaps {
    image: Arc<Qcow2Image>,
    writer: Arc<Writer>,
    loaded: Mutex<Loaded>,
}

impl Qcow2Bitmaps {
    pub fn new(image: Arc<Qcow2Image>, writer: Arc<Writer>) -> Self {
        Qcow2Bitmaps {
            image,
            writer,
            loaded: Mutex::new(Loaded::default()),
        }
    }

    fn cluster(&self) -> u64 {
        self.image.header.cluster_size()
    }

    fn refuse(&self, why: String) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{why}: vbmq does not change such a bitmap (remove it with qemu-img bitmap \
                 --remove, or serve the disk without track-changes: its bitmaps then turn \
                 inconsistent)"
            ),
        )
    }

    /// Writes `bytes` (one bitmap's data) in clusters of their own; the table naming them.
    fn write_data(&self, bytes: &[u8]) -> io::Result<Vec<u64>> {
        let cs = host_size(self.cluster());
        let mut table = Vec::with_capacity(bytes.len().div_ceil(cs));
        for chunk in bytes.chunks(cs) {
            if chunk.iter().all(|&b| b == 0) {
                table.push(0);
                continue;
            }
            let host = self.writer.allocate_run(1)?;
            let mut cluster = chunk.to_vec();
            cluster.resize(cs, 0);
            self.image.file.write_all_at(&cluster, host)?;
            table.push(host);
        }
        Ok(table)
    }

    /// Writes `bytes` in a run of new clusters; where they start.
    fn write_run(&self, bytes: &[u8]) -> io::Result<u64> {
        let cs = self.cluster();
        let clusters = (bytes.len() as u64).div_ceil(cs).max(1);
        let at = self.writer.allocate_run(clusters)?;
        let mut padded = bytes.to_vec();
        padded.resize(host_size(clusters * cs), 0);
        self.image.file.write_all_at(&padded, at)?;
        Ok(at)
    }

    /// The clusters of a bitmap dropped or rewritten.
    fn clusters_of(&self, held: &Held) -> Vec<u64> {
        let cs = self.cluster();
        let Some(table) = &held.table else {
            return Vec::new();
        };
        let table_clusters = (u64::from(held.entry.table_size) * 8).div_ceil(cs);
        data_clusters(table)
            .chain((0..table_clusters).map(|k| held.entry.table_offset + k * cs))
            .collect()
    }
}

/// `src` (one bit per `from` bytes) as one bit per `to` bytes of a disk of `capacity` bytes:
/// every block a set bit touches is set.
fn regrain(src: &[u64], from: u64, to: u64, capacity: u64) -> Vec<u64> {
    let blocks = capacity.div_ceil(to);
    let mut out = vec![0u64; host_size(blocks.div_ceil(64))];
    for (w, &word) in src.iter().enumerate() {
        let mut word = word;
        while word != 0 {
            let bit = (w as u64) * 64 + u64::from(word.trailing_zeros());
            word &= word - 1;
            let start = bit.saturating_mul(from);
            if start >= capacity {
                break;
            }
            let end = start.saturating_add(from).min(capacity);
            for block in start / to..=(end - 1) / to {
                if let Some(slot) = out.get_mut(host_size(block / 64)) {
                    *slot |= 1 << (block % 64);
                }
            }
        }
    }
    out
}

impl ImageBitmaps for Qcow2Bitmaps {
    fn load(&self, capacity: u64, asked: Option<u64>) -> io::Result<ImageMaps> {
        self.load_maps(capacity, asked).inspect_err(|_| {
            // `Writer::open` cleared the autoclear bits; a disk refused leaves them as they
            // were (nothing was written), so QEMU still trusts its bitmaps.
            let image = &*self.image;
            let old = image.header.autoclear.to_be_bytes();
            if let Err(e) = image
                .file
                .write_all_at(&old, OFFSET_AUTOCLEAR)
                .and_then(|()| image.file.sync_data())
            {
                tracing::warn!("cannot restore the image's autoclear bits: {e}");
            }
        })
    }

    fn store(&self, block_size: u64, maps: &[(String, Option<Vec<u64>>)]) -> io::Result<()> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if maps.is_empty() && loaded.dir.is_none() {
            return Ok(());
        }
        self.store_maps(&mut loaded, block_size, maps)
    }
}

impl Qcow2Bitmaps {
    fn load_maps(&self, capacity: u64, asked: Option<u64>) -> io::Result<ImageMaps> {
        let image = &*self.image;
        let cs = self.cluster();
        let file_len = image.file.metadata()?.len();
        let empty = ImageMaps {
            block_size: asked.unwrap_or(DEFAULT_BLOCK),
            maps: Vec::new(),
            reserved: Vec::new(),
        };
        let Some(ext) = HeaderCluster::read(&image.file, cs)?.bitmaps(file_len, cs)? else {
            return Ok(empty);
        };
        if image.header.autoclear & AUTOCLEAR_BITMAPS == 0 {
            tracing::warn!(
                "the image's bitmaps were left inconsistent by a program without bitmap \
                 support: dropped, as QEMU drops them (qemu-img check -r leaks frees their \
                 clusters)"
            );
            return Ok(empty);
        }
        let entries = read_directory(&image.file, ext, image.size(), cs, file_len)?;
        if let Some(e) = entries.iter().find(|e| e.unsupported.is_some()) {
            let why = e.unsupported.clone().unwrap_or_default();
            return Err(self.refuse(format!("bitmap {:?}: {why}", e.name)));
        }
        let enabled = |e: &DirEntry| e.flags & FLAG_AUTO != 0;
        let block_size = asked
            .or_else(|| {
                entries
                    .iter()
                    .filter(|e| enabled(e))
                    .map(DirEntry::granularity)
                    .find(|g| BLOCKS.contains(g))
            })
            .unwrap_or(DEFAULT_BLOCK);
        let mut maps = Vec::new();
        let mut reserved = Vec::new();
        let mut held = Vec::new();
        for entry in entries {
            let in_use = entry.flags & FLAG_IN_USE != 0;
            let table = read_table(&image.file, &entry, cs, file_len);
            let kind = if !enabled(&entry) {
                Kind::Frozen
            } else if valid_name(&entry.name) && maps.len() < MAX_MAPS {
                Kind::Checkpoint
            } else {
                tracing::warn!(
                    "bitmap {:?}: not a checkpoint vbmq keeps (1 to 64 of A-Z a-z 0-9 . _ -, \
                     16 at most): marked in use, inconsistent",
                    entry.name
                );
                Kind::Foreign
            };
            if kind == Kind::Checkpoint {
                let map = if in_use {
                    ImageMap {
                        name: entry.name.clone(),
                        invalid: Some(Invalid::InUse),
                        bits: Vec::new(),
                    }
                } else {
                    let table = table
                        .as_ref()
                        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
                    let bits = read_bits(&image.file, &entry, table, image.size(), cs)?;
                    ImageMap {
                        name: entry.name.clone(),
                        invalid: None,
                        bits: regrain(&bits, entry.granularity(), block_size, capacity),
                    }
                };
                maps.push(map);
            } else if valid_name(&entry.name) {
                reserved.push(entry.name.clone());
            }
            held.push(Held {
                entry,
                table: table.ok(),
                kind,
            });
        }
        // Writes make every enabled bitmap stale: each says so before the first one.
        for h in held.iter().filter(|h| h.kind != Kind::Frozen) {
            let flags = h.entry.flags | FLAG_IN_USE;
            let at = ext.dir_offset + h.entry.at + FLAGS_AT;
            image.file.write_all_at(&flags.to_be_bytes(), at)?;
        }
        image.file.sync_data()?;
        // `Writer::open` cleared it; the directory is consistent again (its bitmaps in use).
        image
            .file
            .write_all_at(&AUTOCLEAR_BITMAPS.to_be_bytes(), OFFSET_AUTOCLEAR)?;
        image.file.sync_data()?;
        *self.loaded.lock().unwrap_or_else(|p| p.into_inner()) = Loaded {
            held,
            dir: Some(ext),
        };
        Ok(ImageMaps {
            block_size,
            maps,
            reserved,
        })
    }

    fn store_maps(
        &self,
        loaded: &mut Loaded,
        block_size: u64,
        maps: &[(String, Option<Vec<u64>>)],
    ) -> io::Result<()> {
        let image = &*self.image;
        let cs = self.cluster();
        let (entries, bytes) = table_size(image.size(), block_size, cs);
        let table_len = u32::try_from(entries).map_err(|_| io::Error::other("bitmap too large"))?;
        let bits = u8::try_from(block_size.trailing_zeros()).unwrap_or(0);
        let mut dir = Vec::new();
        let mut count = 0u32;
        let mut kept = HashSet::new();
        for (name, words) in maps {
            if let Some(words) = words {
                let mut data: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                data.resize(host_size(bytes), 0);
                let table = self.write_data(&data)?;
                let raw: Vec<u8> = table.iter().flat_map(|t| t.to_be_bytes()).collect();
                let at = self.write_run(&raw)?;
                dir.extend(DirEntry::encode(name, at, table_len, FLAG_AUTO, bits));
                count += 1;
            } else if let Some(i) = loaded
                .held
                .iter()
                .position(|h| h.kind == Kind::Checkpoint && h.entry.name == *name)
            {
                // Invalid: kept as it was, in use.
                let h = &loaded.held[i];
                dir.extend(h.entry.raw_with_flags(h.entry.flags | FLAG_IN_USE));
                kept.insert(i);
                count += 1;
            }
        }
        for (i, h) in loaded.held.iter().enumerate() {
            let raw = match h.kind {
                Kind::Checkpoint => continue,
                Kind::Frozen => h.entry.raw.clone(),
                Kind::Foreign => h.entry.raw_with_flags(h.entry.flags | FLAG_IN_USE),
            };
            dir.extend(raw);
            kept.insert(i);
            count += 1;
        }
        // The bitmaps' clusters reach the disk before the directory naming them, and the
        // directory before the header.
        image.file.sync_data()?;
        let ext = if count == 0 {
            None
        } else {
            let dir_offset = self.write_run(&dir)?;
            image.file.sync_data()?;
            Some(Extension {
                count,
                dir_size: dir.len() as u64,
                dir_offset,
            })
        };
        let header = HeaderCluster::read(&image.file, cs)?.encode(ext)?;
        image.file.write_all_at(&header, 0)?;
        image.file.sync_data()?;
        // Nothing names the old clusters any more.
        let mut freed: Vec<u64> = Vec::new();
        for (i, h) in loaded.held.iter().enumerate() {
            if !kept.contains(&i) {
                freed.extend(self.clusters_of(h));
            }
        }
        if let Some(old) = loaded.dir {
            let clusters = old.dir_size.div_ceil(cs);
            freed.extend((0..clusters).map(|k| old.dir_offset + k * cs));
        }
        *loaded = Loaded::default();
        self.writer.release(&freed)?;
        image.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::regrain;

    #[test]
    fn a_bit_marks_every_block_it_touches() {
        // 512-byte chunks onto 4 KiB blocks: chunk 9 is in block 1.
        assert_eq!(regrain(&[1 << 9], 512, 4096, 1 << 20)[0], 0b10);
        // 64 KiB chunks onto 4 KiB blocks: chunk 1 is blocks 16 to 31.
        assert_eq!(regrain(&[0b10], 65536, 4096, 1 << 20)[0], 0xffff_0000);
        // The same grain, a short disk: a bit past the end is dropped.
        assert_eq!(regrain(&[0b101], 4096, 4096, 4096)[0], 1);
    }
}
