//! One qcow2 image and the chain below it: where each guest byte lies (the L1 and L2 tables),
//! and reads on the caller's thread for what is not plain data in the top file (backing files,
//! compressed clusters).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::chain::{BackingFormat, Backings, ChainFiles, MAX_CHAIN, backing_path};
use super::compressed::{Compressed, decompress};
use super::header::Header;
use crate::backend::image_lock::ImageLock;
use crate::backend::thin::read_or_zeros;
use crate::host_size;

/// Bits 9-55 of an L1 or L2 entry: a cluster's offset in the file.
pub const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
/// The cluster's refcount is exactly one: it may be written in place.
pub const COPIED: u64 = 1 << 63;
pub const COMPRESSED: u64 = 1 << 62;
/// (v3, no extended L2) the cluster reads as zeros.
pub const ZERO: u64 = 1;
/// Subclusters per cluster with extended L2 entries.
pub const SUBCLUSTERS: u64 = 32;

/// L2 tables kept in memory, in bytes (QEMU's default L2 cache on Linux).
const L2_CACHE_BYTES: usize = 32 << 20;

/// What a range of guest bytes is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Extent {
    /// Plain data in this image's file at this offset.
    Data(u64),
    /// Reads as zeros.
    Zero,
    /// Not in this image: read from the backing file (zeros without one).
    Backing,
    /// In a compressed cluster (the range starts at `.1` bytes into the cluster).
    Compressed(Compressed, u64),
}

/// The image a qcow2 image's unallocated clusters read from.
pub enum Backing {
    Raw {
        file: File,
        size: u64,
        _lock: ImageLock,
    },
    Qcow2(Box<Qcow2Image>),
}

/// A qcow2 image: its header, L1 table and a cache of its L2 tables.
pub struct Qcow2Image {
    pub file: File,
    pub header: Header,
    /// The virtual size now (it grows with a resize).
    size: AtomicU64,
    pub(super) l1: RwLock<Vec<u64>>,
    l2: RwLock<L2Cache>,
    pub backing: Option<Backing>,
    _lock: Option<ImageLock>,
}

/// L2 tables in memory, by offset in the file. A table changed and not yet written back (see
/// `write`) is pinned: the cache is its only copy.
#[derive(Default)]
struct L2Cache {
    tables: HashMap<u64, Arc<Vec<u8>>>,
    pinned: HashSet<u64>,
}

fn corrupt(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

impl Qcow2Image {
    /// Opens the image in `file` (found at `path`, which its backing file is relative to) and
    /// the chain below it from `backings`, read-only and locked shared.
    pub fn open(file: File, path: &Path, backings: Backings) -> io::Result<Self> {
        let mut chain = ChainFiles::new(&file, path, backings)?;
        let image = Self::open_at_depth(file, path, 0, None, &mut chain)?;
        chain.finish()?;
        Ok(image)
    }

    fn open_at_depth(
        file: File,
        path: &Path,
        depth: usize,
        lock: Option<ImageLock>,
        chain: &mut ChainFiles,
    ) -> io::Result<Self> {
        let header = Header::read(&file)?;
        let mut l1_bytes = vec![0; host_size(u64::from(header.l1_size) * 8)];
        file.read_exact_at(&mut l1_bytes, header.l1_table_offset)?;
        let l1 = l1_bytes
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
            .collect();
        let backing = match &header.backing_file {
            Some(name) => Some(Self::open_backing(
                &backing_path(path, name),
                header.backing_format.as_deref(),
                depth + 1,
                chain,
            )?),
            None => None,
        };
        Ok(Qcow2Image {
            size: AtomicU64::new(header.size),
            file,
            header,
            l1: RwLock::new(l1),
            l2: RwLock::default(),
            backing,
            _lock: lock,
        })
    }

    fn open_backing(
        path: &Path,
        format: Option<&str>,
        depth: usize,
        chain: &mut ChainFiles,
    ) -> io::Result<Backing> {
        if depth > MAX_CHAIN {
            return Err(corrupt(format!("backing chain deeper than {MAX_CHAIN}")));
        }
        let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let file = chain.next(path)?;
        let lock = ImageLock::take(&file, false).map_err(with_name)?;
        match BackingFormat::of(format, &file).map_err(with_name)? {
            BackingFormat::Qcow2 => {
                let image =
                    Self::open_at_depth(file, path, depth, Some(lock), chain).map_err(with_name)?;
                Ok(Backing::Qcow2(Box::new(image)))
            }
            BackingFormat::Raw => {
                let size = file.metadata()?.len();
                Ok(Backing::Raw {
                    file,
                    size,
                    _lock: lock,
                })
            }
        }
    }

    /// The virtual size in bytes.
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Relaxed)
    }

    pub(super) fn set_size(&self, size: u64) {
        self.size.store(size, Ordering::Relaxed);
    }

    /// The L2 table at `offset` in the file, from the cache or read now.
    pub(super) fn l2_table(&self, offset: u64) -> io::Result<Arc<Vec<u8>>> {
        if let Some(table) = self
            .l2
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .tables
            .get(&offset)
        {
            return Ok(table.clone());
        }
        let mut table = vec![0; host_size(self.header.cluster_size())];
        self.file.read_exact_at(&mut table, offset)?;
        let table = Arc::new(table);
        self.cache_l2(offset, table.clone());
        Ok(table)
    }

    /// Puts `table` in the cache as the L2 table at `offset`.
    fn cache_l2(&self, offset: u64, table: Arc<Vec<u8>>) {
        let mut cache = self.l2.write().unwrap_or_else(|p| p.into_inner());
        let L2Cache { tables, pinned } = &mut *cache;
        if tables.len() * table.len() >= L2_CACHE_BYTES {
            tables.retain(|at, _| pinned.contains(at));
        }
        tables.insert(offset, table);
    }

    /// Changes the L2 table at `offset` in memory only, and pins it there until
    /// [`Qcow2Image::unpin_l2`].
    pub(super) fn change_l2(&self, offset: u64, change: impl FnOnce(&mut [u8])) -> io::Result<()> {
        let table = self.l2_table(offset)?;
        let mut cache = self.l2.write().unwrap_or_else(|p| p.into_inner());
        let slot = cache.tables.entry(offset).or_insert(table);
        // Copied only if a reader holds the table at this instant.
        change(Arc::make_mut(slot).as_mut_slice());
        cache.pinned.insert(offset);
        Ok(())
    }

    /// A new L2 table at `offset`, in memory only and pinned there.
    pub(super) fn new_l2(&self, offset: u64, table: Vec<u8>) {
        let mut cache = self.l2.write().unwrap_or_else(|p| p.into_inner());
        cache.tables.insert(offset, Arc::new(table));
        cache.pinned.insert(offset);
    }

    /// The pinned L2 table at `offset` (to write back), if it is.
    pub(super) fn pinned_l2(&self, offset: u64) -> Option<Arc<Vec<u8>>> {
        let cache = self.l2.read().unwrap_or_else(|p| p.into_inner());
        cache
            .pinned
            .contains(&offset)
            .then(|| cache.tables.get(&offset).cloned())
            .flatten()
    }

    /// The L2 table at `offset` is written back: the cache may drop it.
    pub(super) fn unpin_l2(&self, offset: u64) {
        let mut cache = self.l2.write().unwrap_or_else(|p| p.into_inner());
        cache.pinned.remove(&offset);
    }

    /// The L2 table offset and entry index of the cluster holding guest byte `offset`.
    pub(super) fn l2_slot(&self, offset: u64) -> io::Result<(u64, usize)> {
        let h = &self.header;
        let cluster = offset >> h.cluster_bits;
        let l1_index = host_size(cluster / h.l2_entries());
        let l2_index = host_size(cluster % h.l2_entries());
        let l1 = self.l1.read().unwrap_or_else(|p| p.into_inner());
        let entry = l1.get(l1_index).copied().unwrap_or(0);
        let table = entry & OFFSET_MASK;
        if !table.is_multiple_of(h.cluster_size()) {
            return Err(corrupt(format!("L2 table at unaligned offset {table:#x}")));
        }
        Ok((table, l2_index))
    }

    /// The L2 entry (and its subcluster bitmap, with extended L2) at `index` of `table`.
    pub(super) fn l2_entry(&self, table: &[u8], index: usize) -> (u64, u64) {
        let size = host_size(self.header.l2_entry_size());
        let at = index * size;
        let word = |at: usize| {
            table
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_be_bytes)
        };
        let bitmap = if size == 16 { word(at + 8) } else { 0 };
        (word(at), bitmap)
    }

    /// What guest byte `offset` is, and for how many bytes from there (at most to the end of
    /// its cluster, and never past `offset + max`).
    pub fn lookup(&self, offset: u64, max: u64) -> io::Result<(Extent, u64)> {
        let h = &self.header;
        let cs = h.cluster_size();
        let in_cluster = offset & (cs - 1);
        let (table, index) = self.l2_slot(offset)?;
        let rest = (cs - in_cluster).min(max);
        if table == 0 {
            return Ok((Extent::Backing, rest));
        }
        let l2 = self.l2_table(table)?;
        let (entry, bitmap) = self.l2_entry(&l2, index);
        if entry & COMPRESSED != 0 {
            let c = Compressed::from_entry(entry & !(COPIED | COMPRESSED), h.cluster_bits);
            return Ok((Extent::Compressed(c, in_cluster), rest));
        }
        let host = entry & OFFSET_MASK;
        if host != 0 && !host.is_multiple_of(cs) {
            return Err(corrupt(format!(
                "data cluster at unaligned offset {host:#x}"
            )));
        }
        if !h.extended_l2() {
            let extent = if h.version >= 3 && entry & ZERO != 0 {
                Extent::Zero
            } else if host == 0 {
                Extent::Backing
            } else {
                Extent::Data(host + in_cluster)
            };
            return Ok((extent, rest));
        }
        let sc_size = cs / SUBCLUSTERS;
        let kind = |sc: u64| -> io::Result<Extent> {
            if bitmap & (1 << sc) != 0 {
                if host == 0 {
                    return Err(corrupt("allocated subcluster without a cluster"));
                }
                Ok(Extent::Data(host + sc * sc_size))
            } else if bitmap & (1 << (32 + sc)) != 0 {
                Ok(Extent::Zero)
            } else {
                Ok(Extent::Backing)
            }
        };
        let first = in_cluster / sc_size;
        let extent = match kind(first)? {
            Extent::Data(at) => Extent::Data(at + in_cluster % sc_size),
            other => other,
        };
        let same = |a: Extent, b: Extent| {
            matches!(
                (a, b),
                (Extent::Data(_), Extent::Data(_))
                    | (Extent::Zero, Extent::Zero)
                    | (Extent::Backing, Extent::Backing)
            )
        };
        let mut end = first + 1;
        while end < SUBCLUSTERS && same(kind(end)?, extent) {
            end += 1;
        }
        Ok((extent, (end * sc_size - in_cluster).min(max)))
    }

    /// Fills `buf` with the guest's bytes at `offset`, on the caller's thread.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let size = self.size();
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let left = (buf.len() - done) as u64;
            if at >= size {
                buf[done..].fill(0);
                return Ok(());
            }
            let (extent, len) = self.lookup(at, left.min(size - at))?;
            let part = &mut buf[done..done + host_size(len)];
            match extent {
                Extent::Data(host) => read_or_zeros(&self.file, part, host)?,
                Extent::Zero => part.fill(0),
                Extent::Backing => self.read_backing(part, at)?,
                Extent::Compressed(c, skip) => {
                    let cluster = self.inflate(c)?;
                    let skip = host_size(skip);
                    part.copy_from_slice(&cluster[skip..skip + part.len()]);
                }
            }
            done += part.len();
        }
        Ok(())
    }

    /// Fills `buf` from the backing file at `offset`; zeros without one or past its end.
    pub fn read_backing(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match &self.backing {
            None => {
                buf.fill(0);
                Ok(())
            }
            Some(Backing::Qcow2(image)) => image.read_at(buf, offset),
            Some(Backing::Raw { file, size, .. }) => {
                let inside = host_size(size.saturating_sub(offset).min(buf.len() as u64));
                buf[inside..].fill(0);
                read_or_zeros(file, &mut buf[..inside], offset)
            }
        }
    }

    /// A compressed cluster's bytes, inflated.
    pub fn inflate(&self, c: Compressed) -> io::Result<Vec<u8>> {
        let cs = self.header.cluster_size();
        if c.len > 2 * cs {
            return Err(corrupt("compressed cluster larger than two clusters"));
        }
        let mut input = vec![0; host_size(c.len)];
        read_or_zeros(&self.file, &mut input, c.host)?;
        let mut out = vec![0; host_size(cs)];
        decompress(self.header.compression, &input, &mut out)?;
        Ok(out)
    }
}
