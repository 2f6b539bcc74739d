//! `vbmq image create`: a new, empty qcow2 v3 image, optionally over a backing file, laid out
//! as `qemu-img create -f qcow2` lays it out: the header in cluster 0, then the refcount table,
//! the refcount blocks and the L1 table, every one of those clusters counted once (16-bit
//! refcounts), no data cluster. `qemu-img check` finds it clean.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::chain::{BackingFormat, backing_path};
use super::header::{Header, MAGIC};

/// Largest L1 table written (QEMU's `QCOW_MAX_L1_SIZE`).
const MAX_L1_BYTES: u64 = 32 << 20;
/// The v3 header's length with its compression type byte, padded to 8 (as QEMU writes it).
const HEADER_LENGTH: usize = 112;
/// Header extension: the backing file's format.
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
/// `refcount_order` 4: 16-bit refcounts, QEMU's default.
const REFCOUNT_ORDER: u32 = 4;

/// What a new image is.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// The guest's size in bytes (rounded up to 512); `None`: the backing file's.
    pub size: Option<u64>,
    /// Bytes per cluster, a power of two from 512 B to 2 MiB (default 64 KiB).
    pub cluster_size: u64,
    /// The backing file's name as the header keeps it (relative to the new image, or absolute).
    pub backing: Option<String>,
    /// The backing file's format (`qcow2`, `raw`); `None`: probed, and written down.
    pub backing_format: Option<String>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            size: None,
            cluster_size: 64 << 10,
            backing: None,
            backing_format: None,
        }
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why.into())
}

/// Writes a new qcow2 image at `path` (which must not exist) as `options` say.
pub fn create_image(path: &Path, options: &CreateOptions) -> io::Result<()> {
    let cs = options.cluster_size;
    if !cs.is_power_of_two() || !(512..=(2 << 20)).contains(&cs) {
        return Err(invalid("cluster size: a power of two from 512 to 2M"));
    }
    let backing = options
        .backing
        .as_deref()
        .map(|name| backing_of(path, name, options.backing_format.as_deref()))
        .transpose()?;
    let size = match (options.size, &backing) {
        (Some(size), _) => size,
        (None, Some((_, backing_size))) => *backing_size,
        (None, None) => return Err(invalid("size: needed without a backing file")),
    };
    let size = size
        .checked_next_multiple_of(512)
        .ok_or_else(|| invalid("size: too large"))?;
    let format = backing.as_ref().map(|(format, _)| match format {
        BackingFormat::Qcow2 => "qcow2",
        BackingFormat::Raw => "raw",
    });
    let layout = Layout::new(size, cs)?;
    let header = header_cluster(&layout, size, options.backing.as_deref().zip(format))?;
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    write_image(&file, &layout, &header).inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}

/// The backing file `name` names from the new image at `path`: its format and guest size.
fn backing_of(path: &Path, name: &str, format: Option<&str>) -> io::Result<(BackingFormat, u64)> {
    let at = backing_path(path, name);
    let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", at.display()));
    let file = File::open(&at).map_err(with_name)?;
    let format = BackingFormat::of(format, &file).map_err(with_name)?;
    let size = match format {
        BackingFormat::Qcow2 => Header::read(&file).map_err(with_name)?.size,
        BackingFormat::Raw => file.metadata().map_err(with_name)?.len(),
    };
    Ok((format, size))
}

/// Where the metadata clusters lie, by cluster index.
struct Layout {
    cluster_size: u64,
    l1_entries: u64,
    refcount_table: u64,
    refcount_table_clusters: u64,
    refcount_blocks: u64,
    l1_table: u64,
    l1_clusters: u64,
}

impl Layout {
    fn new(size: u64, cs: u64) -> io::Result<Self> {
        let l2_entries = cs / 8;
        let l1_entries = size.div_ceil(cs * l2_entries);
        if l1_entries * 8 > MAX_L1_BYTES {
            return Err(invalid(
                "size: too large for this cluster size (try a larger --cluster-size)",
            ));
        }
        let l1_clusters = (l1_entries * 8).div_ceil(cs).max(1);
        let refcounts_per_block = cs * 8 / (1 << REFCOUNT_ORDER);
        // The refcount blocks count themselves and the table: grow both until they fit.
        let (mut table_clusters, mut blocks) = (1, 1);
        loop {
            let clusters = 1 + table_clusters + blocks + l1_clusters;
            let need_blocks = clusters.div_ceil(refcounts_per_block);
            let need_table = (need_blocks * 8).div_ceil(cs);
            if need_blocks <= blocks && need_table <= table_clusters {
                break;
            }
            blocks = blocks.max(need_blocks);
            table_clusters = table_clusters.max(need_table);
        }
        Ok(Layout {
            cluster_size: cs,
            l1_entries,
            refcount_table: 1,
            refcount_table_clusters: table_clusters,
            refcount_blocks: blocks,
            l1_table: 1 + table_clusters + blocks,
            l1_clusters,
        })
    }

    fn clusters(&self) -> u64 {
        self.l1_table + self.l1_clusters
    }

    fn offset(&self, cluster: u64) -> u64 {
        cluster * self.cluster_size
    }
}

/// A length the header holds in 32 bits (each bounded far below).
fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// Cluster 0: the v3 header, its extensions, the backing file's name.
fn header_cluster(
    layout: &Layout,
    size: u64,
    backing: Option<(&str, &str)>,
) -> io::Result<Vec<u8>> {
    let cs = layout.cluster_size;
    let mut h = Vec::with_capacity(HEADER_LENGTH + 1024);
    let u32s = |h: &mut Vec<u8>, v: u32| h.extend_from_slice(&v.to_be_bytes());
    let u64s = |h: &mut Vec<u8>, v: u64| h.extend_from_slice(&v.to_be_bytes());
    h.extend_from_slice(&MAGIC);
    u32s(&mut h, 3);
    // The backing file's offset and length, set below.
    u64s(&mut h, 0);
    u32s(&mut h, 0);
    u32s(&mut h, cs.trailing_zeros());
    u64s(&mut h, size);
    u32s(&mut h, 0); // no encryption
    u32s(
        &mut h,
        u32::try_from(layout.l1_entries).map_err(|_| invalid("size: too large"))?,
    );
    u64s(&mut h, layout.offset(layout.l1_table));
    u64s(&mut h, layout.offset(layout.refcount_table));
    u32s(
        &mut h,
        u32::try_from(layout.refcount_table_clusters).map_err(|_| invalid("size: too large"))?,
    );
    u32s(&mut h, 0); // snapshots
    u64s(&mut h, 0);
    u64s(&mut h, 0); // incompatible features
    u64s(&mut h, 0); // compatible features
    u64s(&mut h, 0); // autoclear features
    u32s(&mut h, REFCOUNT_ORDER);
    u32s(&mut h, len32(HEADER_LENGTH));
    h.resize(HEADER_LENGTH, 0); // compression type 0 (zlib), padding
    if let Some((_, format)) = backing {
        u32s(&mut h, EXT_BACKING_FORMAT);
        u32s(&mut h, len32(format.len()));
        h.extend_from_slice(format.as_bytes());
        h.resize(h.len().next_multiple_of(8), 0);
    }
    u64s(&mut h, 0); // end of the extensions
    if let Some((name, _)) = backing {
        if name.is_empty() || name.len() > 1023 {
            return Err(invalid("backing: a name of 1 to 1023 bytes"));
        }
        let at = h.len() as u64;
        h[8..16].copy_from_slice(&at.to_be_bytes());
        h[16..20].copy_from_slice(&len32(name.len()).to_be_bytes());
        h.extend_from_slice(name.as_bytes());
    }
    if h.len() as u64 > cs {
        return Err(invalid(
            "backing: the name does not fit in the header's cluster (a larger --cluster-size)",
        ));
    }
    Ok(h)
}

/// The refcount table, its blocks (each metadata cluster counted once), an empty L1 table.
fn write_image(file: &File, layout: &Layout, header: &[u8]) -> io::Result<()> {
    let cs = usize::try_from(layout.cluster_size).map_err(|_| invalid("cluster size"))?;
    let clusters = usize::try_from(layout.clusters()).map_err(|_| invalid("size: too large"))?;
    let blocks = usize::try_from(layout.refcount_blocks).map_err(|_| invalid("size"))?;
    let first_block = layout.refcount_table + layout.refcount_table_clusters;
    let table_len = usize::try_from(layout.refcount_table_clusters).map_err(|_| invalid("size"))?;
    let mut table = vec![0u8; table_len * cs];
    for (i, entry) in table.chunks_exact_mut(8).take(blocks).enumerate() {
        entry.copy_from_slice(&layout.offset(first_block + i as u64).to_be_bytes());
    }
    let mut refcounts = vec![0u8; blocks * cs];
    for count in refcounts.chunks_exact_mut(2).take(clusters) {
        count.copy_from_slice(&1u16.to_be_bytes());
    }
    file.set_len(layout.offset(layout.clusters()))?;
    file.write_all_at(&table, layout.offset(layout.refcount_table))?;
    file.write_all_at(&refcounts, layout.offset(first_block))?;
    // The L1 table is zeros: the file's hole reads so.
    file.write_all_at(header, 0)?;
    file.sync_all()
}
