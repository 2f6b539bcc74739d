//! A qcow2 image (and its chain) as a thin disk's `base=`: read-only, its guest's bytes read
//! through the image's reader on the queue's thread, as the qcow2 disk reads its backing files.
//! DISK and DISK.map stay raw: what the guest writes, or what copy-on-read and the fill copy,
//! lands there, and BASE is never written.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::chain::Backings;
use super::header::has_magic;
use super::image::Qcow2Image;
use crate::backend::FileDisk;
use crate::backend::thin::{BaseImage, ThinBase};

/// A qcow2 BASE, with the file that holds its lock.
struct Qcow2Base {
    image: Qcow2Image,
    _file: FileDisk,
}

impl BaseImage for Qcow2Base {
    fn size(&self) -> u64 {
        self.image.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.image.read_at(buf, offset)
    }
}

/// The thin disk base `file` (opened read-only at `path`) is: a qcow2 image read through its
/// reader, its chain from `backings`, or raw bytes.
pub fn thin_base(file: FileDisk, path: &Path, backings: Backings) -> io::Result<ThinBase> {
    let top = file.file()?;
    if !has_magic(&top)? {
        if let Backings::Given(files) = &backings
            && !files.is_empty()
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "backing files were passed for a raw base",
            ));
        }
        return Ok(ThinBase::File(file));
    }
    let image = Qcow2Image::open(top, path, backings)?;
    if !image.size().is_multiple_of(512) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the qcow2 BASE's size ({}) is not a multiple of 512",
                image.size()
            ),
        ));
    }
    Ok(ThinBase::Image(Arc::new(Qcow2Base { image, _file: file })))
}
