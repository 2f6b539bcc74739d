//! The qcow2 header and its extensions (QEMU's `docs/interop/qcow2.txt`), parsed and checked:
//! every field a later lookup trusts (cluster size, table offsets and sizes) is bounded here.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// `QFI\xfb`.
pub const MAGIC: [u8; 4] = *b"QFI\xfb";

/// Incompatible feature bits.
pub const INCOMPAT_DIRTY: u64 = 1;
pub const INCOMPAT_CORRUPT: u64 = 1 << 1;
pub const INCOMPAT_DATA_FILE: u64 = 1 << 2;
pub const INCOMPAT_COMPRESSION: u64 = 1 << 3;
pub const INCOMPAT_EXTL2: u64 = 1 << 4;
const INCOMPAT_KNOWN: u64 =
    INCOMPAT_DIRTY | INCOMPAT_CORRUPT | INCOMPAT_DATA_FILE | INCOMPAT_COMPRESSION | INCOMPAT_EXTL2;

/// Byte offsets of the fields vbmq rewrites.
pub const OFFSET_SIZE: u64 = 24;
pub const OFFSET_L1_SIZE: u64 = 36;
pub const OFFSET_AUTOCLEAR: u64 = 88;

/// Header extension types.
const EXT_END: u32 = 0;
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
const EXT_DATA_FILE: u32 = 0x4441_5441;

/// Largest L1 table accepted (QEMU's `QCOW_MAX_L1_SIZE`, 32 MiB of entries).
const MAX_L1_BYTES: u64 = 32 << 20;

/// Cluster data compression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Zlib,
    Zstd,
}

/// The header fields vbmq uses.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    pub cluster_bits: u32,
    pub size: u64,
    pub l1_size: u32,
    pub l1_table_offset: u64,
    pub refcount_table_offset: u64,
    pub refcount_table_clusters: u32,
    pub nb_snapshots: u32,
    pub incompatible: u64,
    pub autoclear: u64,
    pub refcount_order: u32,
    pub compression: Compression,
    /// The backing file's name as written in the image.
    pub backing_file: Option<String>,
    /// The backing file's format (`raw`, `qcow2`), if the header says.
    pub backing_format: Option<String>,
}

fn be32(b: &[u8], at: usize) -> u32 {
    let mut v = [0; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(v)
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// Whether `file` starts with the qcow2 magic.
pub fn has_magic(file: &File) -> io::Result<bool> {
    let mut magic = [0; 4];
    match file.read_exact_at(&mut magic, 0) {
        Ok(()) => Ok(magic == MAGIC),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

impl Header {
    /// Reads and checks the header of `file`, `file_len` bytes long.
    pub fn read(file: &File) -> io::Result<Self> {
        let file_len = file.metadata()?.len();
        let mut b = vec![0; 4096];
        let n = file.read_at(&mut b, 0)?;
        if n < 72 || b[..4] != MAGIC {
            return Err(invalid("not a qcow2 image"));
        }
        let version = be32(&b, 4);
        if version != 2 && version != 3 {
            return Err(invalid(format!("qcow2 version {version} is not supported")));
        }
        let cluster_bits = be32(&b, 20);
        if !(9..=21).contains(&cluster_bits) {
            return Err(invalid(format!(
                "cluster_bits {cluster_bits}: clusters of 512 B to 2 MiB only"
            )));
        }
        let crypt = be32(&b, 32);
        if crypt != 0 {
            return Err(invalid("encrypted qcow2 images are not supported"));
        }
        let mut h = Header {
            version,
            cluster_bits,
            size: be64(&b, 24),
            l1_size: be32(&b, 36),
            l1_table_offset: be64(&b, 40),
            refcount_table_offset: be64(&b, 48),
            refcount_table_clusters: be32(&b, 56),
            nb_snapshots: be32(&b, 60),
            incompatible: 0,
            autoclear: 0,
            refcount_order: 4,
            compression: Compression::Zlib,
            backing_file: None,
            backing_format: None,
        };
        let mut header_length = 72;
        if version == 3 {
            if n < 104 {
                return Err(invalid("qcow2 v3 header is truncated"));
            }
            h.incompatible = be64(&b, 72);
            h.autoclear = be64(&b, 88);
            h.refcount_order = be32(&b, 96);
            header_length = be32(&b, 100) as usize;
            if !(104..=n).contains(&header_length) {
                return Err(invalid("qcow2 header length out of range"));
            }
            if header_length > 104 && h.incompatible & INCOMPAT_COMPRESSION != 0 {
                h.compression = match b[104] {
                    0 => Compression::Zlib,
                    1 => Compression::Zstd,
                    t => return Err(invalid(format!("compression type {t} is unknown"))),
                };
            }
        }
        h.check(file_len)?;
        h.read_extensions(&b[..n], header_length)?;
        let (off, len) = (be64(&b, 8), be32(&b, 16) as usize);
        if off != 0 && len > 0 {
            if len > 1023 {
                return Err(invalid("backing file name longer than 1023 bytes"));
            }
            let mut name = vec![0; len];
            file.read_exact_at(&mut name, off)?;
            h.backing_file = Some(
                String::from_utf8(name).map_err(|_| invalid("backing file name is not UTF-8"))?,
            );
        }
        Ok(h)
    }

    fn check(&self, file_len: u64) -> io::Result<()> {
        let unknown = self.incompatible & !INCOMPAT_KNOWN;
        if unknown != 0 {
            return Err(invalid(format!(
                "unknown incompatible features {unknown:#x}"
            )));
        }
        if self.incompatible & INCOMPAT_DATA_FILE != 0 {
            return Err(invalid(
                "the image keeps its data in an external data file: not supported (convert it \
                 with qemu-img convert -O qcow2)",
            ));
        }
        if self.extended_l2() && self.cluster_bits < 14 {
            return Err(invalid(
                "extended L2 entries need clusters of 16 KiB or more",
            ));
        }
        if !(0..=6).contains(&self.refcount_order) {
            return Err(invalid("refcount_order out of range"));
        }
        let cluster = self.cluster_size();
        let l1_bytes = u64::from(self.l1_size) * 8;
        if l1_bytes > MAX_L1_BYTES {
            return Err(invalid("L1 table too large"));
        }
        let covered = u64::from(self.l1_size)
            .checked_mul(self.l2_entries() * cluster)
            .ok_or_else(|| invalid("L1 size overflows"))?;
        if covered < self.size {
            return Err(invalid("the L1 table does not cover the virtual size"));
        }
        let aligned = |off: u64| off.is_multiple_of(cluster);
        if !aligned(self.l1_table_offset) || !aligned(self.refcount_table_offset) {
            return Err(invalid("table offsets are not cluster-aligned"));
        }
        if self.l1_size > 0 && self.l1_table_offset.saturating_add(l1_bytes) > file_len {
            return Err(invalid("the L1 table lies past the end of the file"));
        }
        if !self.size.is_multiple_of(512) {
            return Err(invalid("virtual size is not a multiple of 512"));
        }
        Ok(())
    }

    fn read_extensions(&mut self, b: &[u8], mut at: usize) -> io::Result<()> {
        while at + 8 <= b.len() {
            let (kind, len) = (be32(b, at), be32(b, at + 4) as usize);
            let data = at + 8;
            if kind == EXT_END {
                return Ok(());
            }
            let end = data
                .checked_add(len)
                .filter(|end| *end <= b.len())
                .ok_or_else(|| invalid("header extension past the first 4 KiB"))?;
            match kind {
                EXT_BACKING_FORMAT => {
                    self.backing_format = Some(String::from_utf8_lossy(&b[data..end]).into());
                }
                EXT_DATA_FILE => return Err(invalid("external data files are not supported")),
                _ => {}
            }
            at = data + len.next_multiple_of(8);
        }
        Ok(())
    }

    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    pub fn extended_l2(&self) -> bool {
        self.incompatible & INCOMPAT_EXTL2 != 0
    }

    /// Bytes per L2 entry (16 with extended L2).
    pub fn l2_entry_size(&self) -> u64 {
        if self.extended_l2() { 16 } else { 8 }
    }

    /// Entries per L2 table (one cluster).
    pub fn l2_entries(&self) -> u64 {
        self.cluster_size() / self.l2_entry_size()
    }
}
