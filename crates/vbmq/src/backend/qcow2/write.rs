//! Writes that change a qcow2 image's metadata, on the queue's thread, one at a time.
//!
//! The order of the writes is QEMU's (block/qcow2-cluster.c, qcow2-refcount.c): a new
//! cluster's refcount, its data and a new L2 table are written and flushed before the L2 entry
//! (or the L1 entry of a new table) that makes them visible; a cluster is freed (refcount 0)
//! only once the entries that pointed to it are flushed away. So `kill -9` or a power cut at
//! any instant leaves an image `qemu-img check` finds clean, at worst with leaked clusters;
//! what a guest flush covered is there.
//!
//! As in QEMU, the L2 tables are written back, not through: an allocation writes the cluster's
//! refcount and changes its L2 entry in memory only (the table pinned in the cache), and the
//! guest's flush writes every change of the batch since the last one with one ordering point
//! ([`Writer::write_back`]: new tables, `fdatasync`, then the entries), before the engine's own
//! flush makes the entries durable. An allocation thus costs no flush of its own.
//! Clusters are allocated at the end of the file and never reused while the disk is open, so
//! a write the ring is doing in place never lands in a cluster given out again.
//!
//! `lazy_refcounts`: vbmq keeps refcounts exact anyway, which the feature allows; an image a
//! crash left dirty (refcounts to rebuild) is served read-only until `qemu-img check -r all`.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use super::header::{
    INCOMPAT_CORRUPT, INCOMPAT_DIRTY, OFFSET_AUTOCLEAR, OFFSET_L1_SIZE, OFFSET_SIZE,
};
use super::image::{COMPRESSED, COPIED, Extent, OFFSET_MASK, Qcow2Image, SUBCLUSTERS, ZERO};
use crate::host_size;

/// Largest refcount table read (QEMU's `QCOW_MAX_REFTABLE_SIZE`).
const MAX_REFCOUNT_TABLE_BYTES: u64 = 8 << 20;

/// Allocates clusters and updates the tables of a writable top image.
pub struct Writer {
    image: Arc<Qcow2Image>,
    state: Mutex<State>,
}

/// What allocation needs, behind the writer's lock.
struct State {
    /// Where the next cluster goes: the end of the file.
    next_free: u64,
    /// The refcount table.
    refcount_table: Vec<u64>,
    /// L2 tables changed in memory since the last write-back.
    changed: BTreeSet<u64>,
    /// L2 tables no L1 entry on disk names yet, each with the L1 index that is to name it.
    new_tables: BTreeMap<u64, usize>,
}

fn refuse(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why.to_string())
}

fn corrupt(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// An L2 entry: the cluster's word and, with extended L2, its subcluster bitmap.
#[derive(Clone, Copy)]
struct Entry {
    word: u64,
    bitmap: u64,
}

impl Entry {
    fn host(self) -> u64 {
        self.word & OFFSET_MASK
    }

    /// A data cluster this image alone owns: it may be written where it is.
    fn owned(self) -> bool {
        self.word & COPIED != 0 && self.word & COMPRESSED == 0 && self.host() != 0
    }
}

impl Writer {
    /// Makes `image` writable: refused if it has internal snapshots (left untouched), is
    /// marked corrupt, or was left dirty by a crash with lazy refcounts. Autoclear features
    /// (persistent bitmaps) are cleared, as QEMU clears those it does not keep up to date.
    pub fn open(image: Arc<Qcow2Image>) -> io::Result<Self> {
        let h = &image.header;
        if h.nb_snapshots > 0 {
            return Err(refuse(
                "the image has internal snapshots, which vbmq leaves untouched: serve it with \
                 readonly=on",
            ));
        }
        if h.incompatible & INCOMPAT_CORRUPT != 0 {
            return Err(refuse("the image is marked corrupt: qemu-img check -r all"));
        }
        if h.incompatible & INCOMPAT_DIRTY != 0 {
            return Err(refuse(
                "the image was left dirty (lazy refcounts): qemu-img check -r all, or serve it \
                 with readonly=on",
            ));
        }
        if !(3..=6).contains(&h.refcount_order) {
            return Err(refuse(
                "refcounts narrower than 8 bits are not written by vbmq: serve it with \
                 readonly=on",
            ));
        }
        let cs = h.cluster_size();
        let table_bytes = u64::from(h.refcount_table_clusters) * cs;
        if table_bytes > MAX_REFCOUNT_TABLE_BYTES {
            return Err(corrupt("refcount table larger than 8 MiB"));
        }
        let mut table = vec![0; host_size(table_bytes)];
        image
            .file
            .read_exact_at(&mut table, h.refcount_table_offset)?;
        let refcount_table = table
            .chunks_exact(8)
            .map(|c| c.try_into().map_or(0, u64::from_be_bytes))
            .collect();
        if h.version >= 3 && h.autoclear != 0 {
            image
                .file
                .write_all_at(&0u64.to_be_bytes(), OFFSET_AUTOCLEAR)?;
            image.file.sync_data()?;
        }
        let next_free = image.file.metadata()?.len().next_multiple_of(cs);
        Ok(Writer {
            image,
            state: Mutex::new(State {
                next_free,
                refcount_table,
                changed: BTreeSet::new(),
                new_tables: BTreeMap::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The L2 entry of guest byte `offset`, and its table (0: none yet) and index.
    fn entry(&self, offset: u64) -> io::Result<(Entry, u64, usize)> {
        let (table, index) = self.image.l2_slot(offset)?;
        if table == 0 {
            return Ok((Entry { word: 0, bitmap: 0 }, 0, index));
        }
        let l2 = self.image.l2_table(table)?;
        let (word, bitmap) = self.image.l2_entry(&l2, index);
        Ok((Entry { word, bitmap }, table, index))
    }

    /// The subclusters `[offset, offset + len)` covers in its cluster, as a bitmap.
    fn subclusters(&self, offset: u64, len: u64) -> u64 {
        let cs = self.image.header.cluster_size();
        let sc = cs / SUBCLUSTERS;
        let first = (offset & (cs - 1)) / sc;
        let last = ((offset & (cs - 1)) + len.max(1) - 1) / sc;
        let count = last - first + 1;
        (if count >= 64 {
            u64::MAX
        } else {
            (1 << count) - 1
        }) << first
    }

    /// The host offset where `len` bytes at guest `offset` may be written as they are: inside
    /// one cluster this image owns, allocated (every subcluster) and not marked zero.
    pub fn in_place(&self, offset: u64, len: u64) -> io::Result<Option<u64>> {
        let h = &self.image.header;
        let cs = h.cluster_size();
        let within = offset & (cs - 1);
        if within + len > cs {
            return Ok(None);
        }
        let (entry, _, _) = self.entry(offset)?;
        if !entry.owned() {
            return Ok(None);
        }
        let allocated = if h.extended_l2() {
            let want = self.subclusters(offset, len);
            entry.bitmap & want == want
        } else {
            entry.word & ZERO == 0 || h.version < 3
        };
        Ok(allocated.then_some(entry.host() + within))
    }

    /// Writes `data` at guest `offset`, allocating what it needs.
    pub fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut state = self.lock();
        let cs = self.image.header.cluster_size();
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let n = host_size((cs - (at & (cs - 1))).min((data.len() - done) as u64));
            self.write_in_cluster(&mut state, at, &data[done..done + n])?;
            done += n;
        }
        Ok(())
    }

    /// Writes `data`, inside one cluster, at guest `offset`.
    fn write_in_cluster(&self, state: &mut State, offset: u64, data: &[u8]) -> io::Result<()> {
        let image = &*self.image;
        let h = &image.header;
        let cs = h.cluster_size();
        let start = offset & !(cs - 1);
        let within = offset - start;
        let (entry, table, index) = self.entry(offset)?;
        if entry.owned() {
            if let Some(host) = self.in_place(offset, data.len() as u64)? {
                return image.file.write_all_at(data, host);
            }
            if h.extended_l2() {
                return self.fill_subclusters(state, entry, table, index, offset, data);
            }
            // A preallocated zero cluster: written whole, then no longer zero.
            let mut cluster = vec![0; host_size(cs)];
            let w = host_size(within);
            cluster[w..w + data.len()].copy_from_slice(data);
            image.file.write_all_at(&cluster, entry.host())?;
            let word = entry.word & !ZERO;
            return self.set_entry(state, table, index, Entry { word, ..entry });
        }
        // A new cluster: what the guest sees there now (backing file, compressed, zeros) with
        // `data` laid over it.
        let mut cluster = vec![0; host_size(cs)];
        image.read_at(&mut cluster, start)?;
        let w = host_size(within);
        cluster[w..w + data.len()].copy_from_slice(data);
        let host = self.allocate(state)?;
        image.file.write_all_at(&cluster, host)?;
        let new = Entry {
            word: host | COPIED,
            bitmap: if h.extended_l2() {
                u64::from(u32::MAX)
            } else {
                0
            },
        };
        self.point_to(state, offset, table, index, new)
    }

    /// Sets the L2 entry of guest byte `offset` (at `index` of `table`, 0: no table yet).
    fn point_to(
        &self,
        state: &mut State,
        offset: u64,
        table: u64,
        index: usize,
        entry: Entry,
    ) -> io::Result<()> {
        if table != 0 {
            return self.set_entry(state, table, index, entry);
        }
        self.new_table(state, offset, index, entry)
    }

    /// For a write of `len` bytes at guest `offset`, inside one cluster that reads as zeros
    /// and has no host cluster, in an image without a backing file: allocates the cluster and
    /// returns where the write goes, for the ring to do it. The rest of the cluster is not
    /// written: it lies past the end of the file, and reads as zeros.
    pub fn allocate_zeroed(&self, offset: u64, len: u64) -> io::Result<Option<u64>> {
        let h = &self.image.header;
        let cs = h.cluster_size();
        let within = offset & (cs - 1);
        if len == 0 || within + len > cs || self.image.backing.is_some() {
            return Ok(None);
        }
        let mut state = self.lock();
        let (entry, table, index) = self.entry(offset)?;
        if entry.host() != 0 || entry.word & COMPRESSED != 0 {
            return Ok(None);
        }
        let host = self.allocate(&mut state)?;
        let new = Entry {
            word: host | COPIED,
            bitmap: if h.extended_l2() {
                u64::from(u32::MAX)
            } else {
                0
            },
        };
        self.point_to(&mut state, offset, table, index, new)?;
        Ok(Some(host + within))
    }

    /// With extended L2: writes `data` into a cluster the image owns, making the subclusters
    /// it covers that were not allocated whole first (their bytes as the guest sees them).
    fn fill_subclusters(
        &self,
        state: &mut State,
        entry: Entry,
        table: u64,
        index: usize,
        offset: u64,
        data: &[u8],
    ) -> io::Result<()> {
        let image = &*self.image;
        let cs = image.header.cluster_size();
        let sc = cs / SUBCLUSTERS;
        let start = offset & !(cs - 1);
        let want = self.subclusters(offset, data.len() as u64);
        let missing = want & !entry.bitmap & u64::from(u32::MAX);
        let mut buf = vec![0; host_size(sc)];
        for i in 0..SUBCLUSTERS {
            if missing & (1 << i) == 0 {
                continue;
            }
            let at = start + i * sc;
            image.read_at(&mut buf, at)?;
            // The part of `data` inside this subcluster.
            let from = offset.max(at);
            let to = (offset + data.len() as u64).min(at + sc);
            let (b, d) = (host_size(from - at), host_size(from - offset));
            let n = host_size(to - from);
            buf[b..b + n].copy_from_slice(&data[d..d + n]);
            image.file.write_all_at(&buf, entry.host() + i * sc)?;
        }
        // The subclusters that were allocated already take their part as they are.
        for i in 0..SUBCLUSTERS {
            if want & (1 << i) == 0 || missing & (1 << i) != 0 {
                continue;
            }
            let at = start + i * sc;
            let from = offset.max(at);
            let to = (offset + data.len() as u64).min(at + sc);
            let d = host_size(from - offset);
            let n = host_size(to - from);
            image
                .file
                .write_all_at(&data[d..d + n], entry.host() + (from - start))?;
        }
        let bitmap = (entry.bitmap | missing) & !(missing << 32);
        self.set_entry(state, table, index, Entry { bitmap, ..entry })
    }

    /// Sets entry `index` of the L2 table at `table`, in memory until the next write-back.
    fn set_entry(
        &self,
        state: &mut State,
        table: u64,
        index: usize,
        entry: Entry,
    ) -> io::Result<()> {
        let size = host_size(self.image.header.l2_entry_size());
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&entry.word.to_be_bytes());
        bytes[8..].copy_from_slice(&entry.bitmap.to_be_bytes());
        let at = index * size;
        self.image.change_l2(table, |l2| {
            if let Some(slot) = l2.get_mut(at..at + size) {
                slot.copy_from_slice(&bytes[..size]);
            }
        })?;
        state.changed.insert(table);
        Ok(())
    }

    /// Makes the L2 table for guest byte `offset`, holding `entry` at `index`, in memory; the
    /// next write-back writes it, then the L1 entry that names it.
    fn new_table(
        &self,
        state: &mut State,
        offset: u64,
        index: usize,
        entry: Entry,
    ) -> io::Result<()> {
        let image = &*self.image;
        let h = &image.header;
        let l1_index = host_size((offset >> h.cluster_bits) / h.l2_entries());
        if l1_index >= image.l1.read().unwrap_or_else(|p| p.into_inner()).len() {
            return Err(corrupt("guest offset past the L1 table"));
        }
        let size = host_size(h.l2_entry_size());
        let mut l2 = vec![0; host_size(h.cluster_size())];
        let at = index * size;
        l2[at..at + 8].copy_from_slice(&entry.word.to_be_bytes());
        if size == 16 {
            l2[at + 8..at + 16].copy_from_slice(&entry.bitmap.to_be_bytes());
        }
        let table = self.allocate(state)?;
        image.new_l2(table, l2);
        state.new_tables.insert(table, l1_index);
        let mut l1 = image.l1.write().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = l1.get_mut(l1_index) {
            *slot = table | COPIED;
        }
        Ok(())
    }

    /// Writes the metadata changed since the last write-back, the batch's one ordering point:
    /// the new L2 tables, then a flush of them with the data and refcounts the entries name,
    /// then the entries (changed tables, the L1 entries of new tables). The caller's flush
    /// makes these last writes durable.
    pub fn write_back(&self) -> io::Result<()> {
        self.write_back_locked(&mut self.lock())
    }

    fn write_back_locked(&self, state: &mut State) -> io::Result<()> {
        if state.changed.is_empty() && state.new_tables.is_empty() {
            return Ok(());
        }
        let image = &*self.image;
        let file = &image.file;
        for &table in state.new_tables.keys() {
            if let Some(l2) = image.pinned_l2(table) {
                file.write_all_at(&l2, table)?;
            }
        }
        // A cluster the ring has not written yet may lie past the end of the file: the file
        // covers every cluster an entry names, so none is given out again after a restart.
        if file.metadata()?.len() < state.next_free {
            file.set_len(state.next_free)?;
        }
        file.sync_data()?;
        for &table in &state.changed {
            if !state.new_tables.contains_key(&table)
                && let Some(l2) = image.pinned_l2(table)
            {
                file.write_all_at(&l2, table)?;
            }
        }
        let l1_at = image.header.l1_table_offset;
        for (&table, &l1_index) in &state.new_tables {
            file.write_all_at(&(table | COPIED).to_be_bytes(), l1_at + 8 * l1_index as u64)?;
        }
        let changed = std::mem::take(&mut state.changed);
        let new_tables = std::mem::take(&mut state.new_tables);
        for table in changed.into_iter().chain(new_tables.into_keys()) {
            image.unpin_l2(table);
        }
        Ok(())
    }

    /// A new cluster at the end of the file with refcount 1 (written, not flushed: the caller
    /// flushes before anything points to it).
    fn allocate(&self, state: &mut State) -> io::Result<u64> {
        let h = &self.image.header;
        let cs = h.cluster_size();
        let entries = (cs * 8) >> h.refcount_order;
        loop {
            let cluster = state.next_free >> h.cluster_bits;
            let slot = host_size(cluster / entries);
            let Some(&block) = state.refcount_table.get(slot) else {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    "the refcount table is full (qemu-img amend or convert grows it)",
                ));
            };
            let block = block & OFFSET_MASK;
            if block != 0 {
                let host = state.next_free;
                self.set_refcount(block, cluster % entries, 1)?;
                state.next_free += cs;
                return Ok(host);
            }
            // No refcount block covers this part of the file yet: the next cluster becomes
            // one, counting itself, flushed before the refcount table names it.
            let host = state.next_free;
            let mut rb = vec![0; host_size(cs)];
            let width = 1usize << (h.refcount_order - 3);
            let at = host_size(cluster % entries) * width;
            rb[at + width - 1] = 1;
            self.image.file.write_all_at(&rb, host)?;
            self.image.file.sync_data()?;
            let table_at = h.refcount_table_offset + 8 * slot as u64;
            self.image
                .file
                .write_all_at(&host.to_be_bytes(), table_at)?;
            self.image.file.sync_data()?;
            state.refcount_table[slot] = host;
            state.next_free += cs;
        }
    }

    /// `n` new clusters in a row at the end of the file, refcount 1 each (written, not
    /// flushed: the caller flushes before anything points to them). For persistent bitmaps'
    /// tables and directory, which are contiguous.
    pub(super) fn allocate_run(&self, n: u64) -> io::Result<u64> {
        let mut state = self.lock();
        let cs = self.image.header.cluster_size();
        let first = self.allocate(&mut state)?;
        let mut run = (first, 1);
        while run.1 < n {
            let host = self.allocate(&mut state)?;
            if host != run.0 + run.1 * cs {
                // A new refcount block came between: what came before is free again.
                for k in 0..run.1 {
                    self.free(&state, run.0 + k * cs)?;
                }
                run = (host, 0);
            }
            run.1 += 1;
        }
        Ok(run.0)
    }

    /// Frees the host clusters `hosts`, which nothing on disk names any more (flushed).
    pub(super) fn release(&self, hosts: &[u64]) -> io::Result<()> {
        let state = self.lock();
        for &host in hosts {
            self.free(&state, host)?;
        }
        Ok(())
    }

    /// Writes refcount `value` of entry `index` of the refcount block at `block`.
    fn set_refcount(&self, block: u64, index: u64, value: u64) -> io::Result<()> {
        let width = 1u64 << (self.image.header.refcount_order - 3);
        let bytes = value.to_be_bytes();
        let field = &bytes[host_size(8 - width)..];
        self.image.file.write_all_at(field, block + index * width)
    }

    /// Zeroes `len` bytes at `offset`: whole clusters become zero clusters (their space
    /// freed), the rest is written with zeros.
    pub fn zero(&self, offset: u64, len: u64, unmap: bool) -> io::Result<()> {
        let _ = unmap;
        let h = &self.image.header;
        let cs = h.cluster_size();
        let end = offset + len;
        let mut at = offset;
        let mut freed = Vec::new();
        let zeros = vec![0; host_size(cs)];
        let mut state = self.lock();
        while at < end {
            let n = (cs - (at & (cs - 1))).min(end - at);
            // v2 has no zero flag: over a backing file, only written zeros hide it.
            let flag = h.version >= 3 || self.image.backing.is_none();
            if n < cs || !flag {
                self.write_zeros(&mut state, at, &zeros[..host_size(n)])?;
            } else if let Some(host) = self.zero_cluster(&mut state, at)? {
                freed.push(host);
            }
            at += n;
        }
        if freed.is_empty() {
            return Ok(());
        }
        // The entries that named them reach the disk before the clusters are free.
        self.write_back_locked(&mut state)?;
        self.image.file.sync_data()?;
        for host in freed {
            self.free(&state, host)?;
        }
        Ok(())
    }

    fn write_zeros(&self, state: &mut State, at: u64, zeros: &[u8]) -> io::Result<()> {
        if matches!(self.image.lookup(at, zeros.len() as u64)?, (Extent::Zero, n) if n == zeros.len() as u64)
        {
            return Ok(());
        }
        self.write_in_cluster(state, at, zeros)
    }

    /// Marks the whole cluster at guest `offset` zero; the host cluster it had, to free.
    fn zero_cluster(&self, state: &mut State, offset: u64) -> io::Result<Option<u64>> {
        let h = &self.image.header;
        let (entry, table, index) = self.entry(offset)?;
        let new = if h.extended_l2() {
            Entry {
                word: 0,
                bitmap: u64::from(u32::MAX) << 32,
            }
        } else {
            // v2 has no zero flag: used only without a backing file, where unallocated is zero.
            Entry {
                word: if h.version >= 3 { ZERO } else { 0 },
                bitmap: 0,
            }
        };
        if table == 0 {
            if self.image.backing.is_none() {
                return Ok(None);
            }
            self.new_table(state, offset, index, new)?;
            return Ok(None);
        }
        self.set_entry(state, table, index, new)?;
        Ok(entry.owned().then_some(entry.host()))
    }

    /// Sets the refcount of the host cluster at `host` to zero.
    fn free(&self, state: &State, host: u64) -> io::Result<()> {
        let h = &self.image.header;
        let entries = (h.cluster_size() * 8) >> h.refcount_order;
        let cluster = host >> h.cluster_bits;
        let block = state
            .refcount_table
            .get(host_size(cluster / entries))
            .map_or(0, |b| b & OFFSET_MASK);
        if block == 0 {
            return Err(corrupt("a cluster in use has no refcount block"));
        }
        self.set_refcount(block, cluster % entries, 0)
    }

    /// Grows the virtual size to `bytes`, within the room the L1 table has in its clusters.
    pub fn grow(&self, bytes: u64) -> io::Result<()> {
        let _state = self.lock();
        let image = &*self.image;
        let h = &image.header;
        let cs = h.cluster_size();
        let per_l1 = h.l2_entries() * cs;
        let needed = bytes.div_ceil(per_l1);
        let mut l1 = image.l1.write().unwrap_or_else(|p| p.into_inner());
        let room = (l1.len() as u64 * 8).next_multiple_of(cs) / 8;
        if needed > room {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the L1 table has no room for that size: qemu-img resize",
            ));
        }
        if needed > l1.len() as u64 {
            let l1_size = u32::try_from(needed).map_err(|_| corrupt("L1 size overflows"))?;
            // The new entries are empty before the header counts them.
            let zeros = vec![0; host_size(needed * 8) - l1.len() * 8];
            let tail = h.l1_table_offset + l1.len() as u64 * 8;
            image.file.write_all_at(&zeros, tail)?;
            image.file.sync_data()?;
            image
                .file
                .write_all_at(&l1_size.to_be_bytes(), OFFSET_L1_SIZE)?;
            l1.resize(host_size(needed), 0);
        }
        image.file.write_all_at(&bytes.to_be_bytes(), OFFSET_SIZE)?;
        image.file.sync_data()?;
        image.set_size(bytes);
        Ok(())
    }
}

impl Drop for Writer {
    /// The last engine of the disk is gone: what is still in memory goes to the disk.
    fn drop(&mut self) {
        let written = self.write_back().and_then(|()| self.image.file.sync_data());
        if let Err(e) = written {
            crate::limited!(error, "qcow2: metadata not written back at close: {e}");
        }
    }
}
