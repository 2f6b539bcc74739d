//! The files below a qcow2 image: its backing chain, top's backing file first.
//!
//! One walk finds them by name, as QEMU does (each name relative to the image that writes it,
//! `backing_fmt` honoured, else probed): `vbmq ctl add-disk` walks with the operator's rights
//! and passes the files it opened, and an unconfined vbmq walks at start. The image is then
//! built from the files alone ([`Backings::Given`]), so a confined vbmq opens no path, and a
//! chain it was not given whole is refused.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::header::{Header, has_magic};

/// Deepest backing chain opened (a chain that loops ends here).
pub const MAX_CHAIN: usize = 64;

/// What a backing file is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackingFormat {
    Qcow2,
    Raw,
}

impl BackingFormat {
    /// The format `backing_fmt` names, or (none named) the one `file` probes as.
    pub fn of(named: Option<&str>, file: &File) -> io::Result<Self> {
        match named {
            Some("qcow2") => Ok(Self::Qcow2),
            Some("raw") => Ok(Self::Raw),
            Some(other) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("backing format {other:?} is not supported"),
            )),
            None if has_magic(file)? => Ok(Self::Qcow2),
            None => Ok(Self::Raw),
        }
    }
}

/// Where QEMU finds a backing file named `name` by the image at `image`: as it is if absolute,
/// else relative to the image's directory.
pub fn backing_path(image: &Path, name: &str) -> PathBuf {
    let name = Path::new(name);
    if name.is_absolute() {
        return name.to_path_buf();
    }
    image.parent().unwrap_or(Path::new("")).join(name)
}

/// A file of a chain, and where its name led (for messages).
pub struct BackingFile {
    /// Its name, resolved.
    pub path: PathBuf,
    /// Opened read-only.
    pub file: File,
}

/// The chain below the qcow2 image `image` (found at `path`), opened read-only by name, top's
/// backing file first; empty when the image has none.
pub fn open_backing_files(image: &File, path: &Path) -> io::Result<Vec<BackingFile>> {
    let mut chain: Vec<BackingFile> = Vec::new();
    let mut header = Header::read(image)?;
    let mut named_by = path.to_path_buf();
    while let Some(name) = header.backing_file.take() {
        if chain.len() >= MAX_CHAIN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("backing chain deeper than {MAX_CHAIN}"),
            ));
        }
        let path = backing_path(&named_by, &name);
        let with_name = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .open(&path)
            .map_err(with_name)?;
        let format =
            BackingFormat::of(header.backing_format.as_deref(), &file).map_err(with_name)?;
        let next = match format {
            BackingFormat::Qcow2 => Some(Header::read(&file).map_err(with_name)?),
            BackingFormat::Raw => None,
        };
        chain.push(BackingFile {
            path: path.clone(),
            file,
        });
        match next {
            Some(next) => header = next,
            None => break,
        }
        named_by = path;
    }
    Ok(chain)
}

/// Where an image's backing files come from.
pub enum Backings {
    /// Opened by name now (see [`open_backing_files`]).
    ByName,
    /// Opened and passed by a client, top's backing file first: every file the chain names,
    /// and no other.
    Given(Vec<File>),
}

/// The files of a chain as the image opener takes them, one per level.
pub(super) struct ChainFiles {
    files: VecDeque<BackingFile>,
    given: bool,
}

impl ChainFiles {
    /// The files below `image` (at `path`), from `backings`.
    pub(super) fn new(image: &File, path: &Path, backings: Backings) -> io::Result<Self> {
        Ok(match backings {
            Backings::ByName => ChainFiles {
                files: open_backing_files(image, path)?.into(),
                given: false,
            },
            Backings::Given(files) => ChainFiles {
                files: files
                    .into_iter()
                    .map(|file| BackingFile {
                        path: PathBuf::new(),
                        file,
                    })
                    .collect(),
                given: true,
            },
        })
    }

    /// The file for the backing file the header names `path`.
    pub(super) fn next(&mut self, path: &Path) -> io::Result<File> {
        match self.files.pop_front() {
            Some(backing) => Ok(backing.file),
            None if self.given => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: not passed: the whole backing chain is passed with the image \
                     (`vbmq ctl add-disk` opens every file of it)",
                    path.display()
                ),
            )),
            // The file changed between the walk and the open.
            None => Err(io::Error::other(format!(
                "{}: the backing chain changed while it was opened",
                path.display()
            ))),
        }
    }

    /// Every file was used: none passed beyond the chain's end.
    pub(super) fn finish(self) -> io::Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} more backing file(s) passed than the image's chain has",
                self.files.len()
            ),
        ))
    }
}
