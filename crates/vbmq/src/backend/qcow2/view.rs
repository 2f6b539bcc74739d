//! The guest's view of a qcow2 disk, read on the caller's thread: what a snapshot copies and an
//! export serves (`backend/snapshot`), and which ranges read as zeros without being stored
//! (`base:allocation`).
//!
//! It reads through the same tables the queues' engines use, the L2 changes held in memory
//! until the next write-back included, so it sees every write the engines have made visible.

use std::fs::File;
use std::io;
use std::sync::Arc;

use super::image::{Backing, Extent, Qcow2Image};
use crate::held_files::{self, Held};

/// A read-only look at a qcow2 disk's contents (see the module's comment).
pub struct Qcow2Reader {
    image: Arc<Qcow2Image>,
    /// Every file of the chain, recorded as in use while the disk is open: no snapshot of any
    /// disk may be written into a backing file (it would truncate it).
    _held: Vec<Held>,
}

impl Qcow2Reader {
    pub(super) fn new(image: Arc<Qcow2Image>) -> io::Result<Self> {
        let held = chain_files(&image)
            .into_iter()
            .map(held_files::hold)
            .collect::<io::Result<_>>()?;
        Ok(Qcow2Reader { image, _held: held })
    }

    /// Fills `buf` with the guest's bytes at `offset` (zeros past the end).
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.image.read_at(buf, offset)
    }

    /// Whether `[offset, offset + len)` reads as zeros without being stored: zero clusters,
    /// and clusters no image of the chain holds (down to a raw backing file's holes, which
    /// `raw_hole` tells). Errors count as data.
    pub fn is_hole(&self, offset: u64, len: u64, raw_hole: fn(&File, u64, u64) -> bool) -> bool {
        is_hole_in(&self.image, offset, len, raw_hole)
    }

    /// Every file of the chain, the top image first.
    pub fn files(&self) -> Vec<&File> {
        chain_files(&self.image)
    }
}

/// Every file of `image`'s chain, `image`'s first.
fn chain_files(mut image: &Qcow2Image) -> Vec<&File> {
    let mut files = vec![&image.file];
    loop {
        match &image.backing {
            None => return files,
            Some(Backing::Raw { file, .. }) => {
                files.push(file);
                return files;
            }
            Some(Backing::Qcow2(below)) => {
                files.push(&below.file);
                image = below;
            }
        }
    }
}

fn is_hole_in(
    image: &Qcow2Image,
    offset: u64,
    len: u64,
    raw_hole: fn(&File, u64, u64) -> bool,
) -> bool {
    let size = image.size();
    let end = offset.saturating_add(len).min(size);
    let mut at = offset;
    while at < end {
        let Ok((extent, n)) = image.lookup(at, end - at) else {
            return false;
        };
        if n == 0 {
            return false;
        }
        let hole = match extent {
            Extent::Zero => true,
            Extent::Data(_) | Extent::Compressed(..) => false,
            Extent::Backing => match &image.backing {
                None => true,
                Some(Backing::Qcow2(below)) => is_hole_in(below, at, n, raw_hole),
                Some(Backing::Raw { file, size, .. }) => {
                    at >= *size || raw_hole(file, at, n.min(size - at))
                }
            },
        };
        if !hole {
            return false;
        }
        at += n;
    }
    true
}
