//! Where a thin disk's unwritten blocks come from: a read-only raw file, an image read through
//! its format's reader (a qcow2 image and its chain), or an NBD export.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::nbd_base::NbdBase;
use crate::backend::FileDisk;

/// A thin disk's base.
pub enum ThinBase {
    /// A read-only raw image or block device, read through the queues' rings.
    File(FileDisk),
    /// An image whose bytes are not its guest's (qcow2), read on the queue's thread through
    /// its reader.
    Image(Arc<dyn BaseImage>),
    /// An NBD export, read through its fetcher (see [`NbdBase`]).
    Nbd(Arc<NbdBase>),
}

/// A read-only image read through its format's reader, on the caller's thread.
pub trait BaseImage: Send + Sync {
    /// The guest's size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the guest's bytes at `offset`; past the end, zeros.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

/// The base read on the caller's thread: by the fill and by a snapshot's copies.
pub enum BaseReader {
    /// A file, with positional reads.
    File(File),
    /// An image, through its reader.
    Image(Arc<dyn BaseImage>),
    /// An export, through its fetcher.
    Nbd(Arc<NbdBase>),
}

impl ThinBase {
    /// A reader of the base for another thread.
    pub(super) fn reader(&self) -> io::Result<BaseReader> {
        Ok(match self {
            ThinBase::File(file) => BaseReader::File(file.file()?),
            ThinBase::Image(image) => BaseReader::Image(image.clone()),
            ThinBase::Nbd(nbd) => BaseReader::Nbd(nbd.clone()),
        })
    }
}

impl BaseReader {
    /// Fills `buf` from `offset`; what lies past a file's end reads as zeros.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            BaseReader::File(file) => read_or_zeros(file, buf, offset),
            BaseReader::Image(image) => image.read_at(buf, offset),
            BaseReader::Nbd(nbd) => nbd.read_at(buf, offset),
        }
    }

    /// The file, for a raw base.
    pub fn file(&self) -> Option<&File> {
        match self {
            BaseReader::File(file) => Some(file),
            BaseReader::Image(_) | BaseReader::Nbd(_) => None,
        }
    }

    /// Whether a failed read is worth trying again later (the export may come back).
    pub fn retries(&self) -> bool {
        matches!(self, BaseReader::Nbd(_))
    }
}

/// Fills `buf` from `file` at `offset`; what lies past the file's end reads as zeros (a sparse
/// DISK may be shorter than its blocks).
pub fn read_or_zeros(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                buf[done..].fill(0);
                return Ok(());
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
