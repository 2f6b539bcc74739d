//! A disk's storage stack as data: its storage, then its layers bottom to top, each with its
//! typed options and the files it needs. `devices/disk.rs` builds a disk from it in one loop;
//! what `vbmq ctl add-disk` opens, what the daemon checks and what `reload --replace` keeps
//! come from [`StackSpec::needed_files`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::layer_spec::LayerFile;
use super::{DiskSpec, LayerSpec, Storage};
use crate::backend::changes::changes_path;
use crate::backend::thin::map_path;
use crate::backend::{RbdTarget, ThinOptions};
use crate::nbd::uri::NbdUri;

/// What stores a disk's blocks.
#[derive(Clone, Debug)]
pub enum StorageSpec {
    /// A raw image file or block device (with the snapshot layer over it, which reads the
    /// image beneath the engines).
    File {
        /// The image.
        path: PathBuf,
    },
    /// `path=DISK,base=BASE`: DISK holds what was written, the rest reads from BASE (with the
    /// snapshot layer over it).
    Thin {
        /// DISK.
        path: PathBuf,
        /// Where the unwritten blocks come from.
        base: BaseSpec,
        /// `base-block=`, `base-copy-on-read=`, `base-fill=`.
        options: ThinOptions,
    },
    /// A Ceph RBD image.
    Rbd(RbdTarget),
    /// Host memory, optionally loaded from a raw image.
    Memory {
        /// Bytes.
        size: u64,
        /// The image loaded at start.
        image: Option<PathBuf>,
    },
    /// Stores nothing.
    Null(u64),
}

/// What a thin disk's base is.
#[derive(Clone, Debug)]
pub enum BaseSpec {
    /// A read-only raw image or block device.
    File(PathBuf),
    /// An NBD export (`base=nbd+unix:///NAME?socket=PATH`), connected to by its socket's path.
    Nbd {
        /// The export.
        uri: NbdUri,
        /// How long a read waits for a lost connection (`base-timeout=`).
        timeout: Duration,
    },
}

/// A file a disk opens besides its socket: what `vbmq ctl add-disk` opens and passes, what a
/// confined daemon must be passed, what `reload --replace` keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeededFile {
    /// The image (`path=`).
    Image(PathBuf),
    /// A thin disk's base, read-only.
    Base(PathBuf),
    /// A thin disk's map, `DISK.map`.
    ThinMap(PathBuf),
    /// The changed-block maps, `DISK.changes`.
    Changes(PathBuf),
    /// The key file or pipe.
    Key(PathBuf),
}

impl NeededFile {
    /// The `--disk` key an error about it names.
    pub fn key(&self) -> &'static str {
        match self {
            NeededFile::Image(_) => "path",
            NeededFile::Base(_) | NeededFile::ThinMap(_) => "base",
            NeededFile::Changes(_) => "track-changes",
            NeededFile::Key(_) => "key-file",
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        match self {
            NeededFile::Image(path)
            | NeededFile::Base(path)
            | NeededFile::ThinMap(path)
            | NeededFile::Changes(path)
            | NeededFile::Key(path) => path,
        }
    }
}

/// A disk's storage and its layers, bottom to top.
#[derive(Clone, Debug)]
pub struct StackSpec {
    /// What stores the blocks.
    pub storage: StorageSpec,
    /// The layers over it, bottom to top.
    pub layers: Vec<LayerSpec>,
}

impl StackSpec {
    /// The image file, for `path=` disks.
    pub fn image(&self) -> Option<&Path> {
        match &self.storage {
            StorageSpec::File { path } | StorageSpec::Thin { path, .. } => Some(path),
            _ => None,
        }
    }

    /// Every file the storage and the layers open, bottom to top.
    pub fn needed_files(&self) -> Vec<NeededFile> {
        let mut files = Vec::new();
        match &self.storage {
            StorageSpec::File { path } => files.push(NeededFile::Image(path.clone())),
            StorageSpec::Thin { path, base, .. } => {
                files.push(NeededFile::Image(path.clone()));
                match base {
                    BaseSpec::File(base) => files.push(NeededFile::Base(base.clone())),
                    // Connected to by vbmq itself, at start and after a lost connection.
                    BaseSpec::Nbd { .. } => {}
                }
                files.push(NeededFile::ThinMap(map_path(path)));
            }
            StorageSpec::Rbd(_) | StorageSpec::Memory { .. } | StorageSpec::Null(_) => {}
        }
        for layer in &self.layers {
            match layer.file() {
                Some(LayerFile::Changes) => {
                    if let Some(image) = self.image() {
                        files.push(NeededFile::Changes(changes_path(image)));
                    }
                }
                Some(LayerFile::Key(path)) => files.push(NeededFile::Key(path)),
                None => {}
            }
        }
        files
    }
}

impl DiskSpec {
    /// The disk's stack: its storage, then its layers in the one order they compose in (the
    /// changed blocks under the cipher, so they count what reaches the image; the cipher under
    /// the cache, which holds plaintext in vbmq's memory only; the layers of
    /// [`LayerSpec::set_key`] above it; the test delay on top).
    pub fn stack(&self) -> StackSpec {
        let storage = match &self.storage {
            Storage::File(path) => match &self.base {
                Some(base) => StorageSpec::Thin {
                    path: path.clone(),
                    base: match &self.base_nbd {
                        Some(uri) => BaseSpec::Nbd {
                            uri: uri.clone(),
                            timeout: Duration::from_secs(self.base_timeout.unwrap_or(30)),
                        },
                        None => BaseSpec::File(base.clone()),
                    },
                    options: ThinOptions {
                        block_size: self.base_block,
                        copy_on_read: self.base_copy_on_read,
                        fill: self.base_fill,
                    },
                },
                None => StorageSpec::File { path: path.clone() },
            },
            Storage::Rbd(target) => StorageSpec::Rbd(target.clone()),
            Storage::Memory { size, image } => StorageSpec::Memory {
                size: *size,
                image: image.clone(),
            },
            Storage::Null(size) => StorageSpec::Null(*size),
        };
        let mut layers = Vec::new();
        if self.track_changes {
            layers.push(LayerSpec::TrackChanges {
                block: self.track_block,
            });
        }
        if let Some(key_file) = &self.key_file {
            layers.push(LayerSpec::Encrypt {
                key_file: key_file.clone(),
                discard: self.encrypt_discard,
            });
        }
        if self.cache > 0 {
            layers.push(LayerSpec::Cache {
                bytes: self.cache,
                preload: self.cache_preload,
            });
        }
        layers.extend(self.keyed_layers.iter().cloned());
        if self.delay_us > 0 {
            layers.push(LayerSpec::Delay {
                delay: Duration::from_micros(self.delay_us),
                every: self.delay_every,
            });
        }
        StackSpec { storage, layers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(text: &str) -> StackSpec {
        DiskSpec::parse(&format!("socket=/s,{text}"), &[0])
            .unwrap()
            .stack()
    }

    #[test]
    fn layers_stack_in_one_order_whatever_the_keys_order() {
        let text = "cache=1M,delay-us=5,discard=off,key-file=/k,encrypt=aes-xts,track-changes=on,\
                    path=/d";
        // The variants' names, from their debug form.
        let kinds: Vec<String> = stack(text)
            .layers
            .iter()
            .map(|layer| format!("{layer:?}").replace(['{', '('], " "))
            .map(|text| {
                text.split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        assert_eq!(
            kinds,
            ["TrackChanges", "Encrypt", "Cache", "DiscardOff", "Delay"]
        );
    }

    #[test]
    fn a_layer_parsing_its_own_keys_is_set_by_its_last_key() {
        assert_eq!(stack("null=1M,discard=off").layers, [LayerSpec::DiscardOff]);
        assert!(stack("null=1M,discard=off,discard=on").layers.is_empty());
        assert!(
            stack("null=1M,discard=on,discard=off,discard=off").layers == [LayerSpec::DiscardOff]
        );
        let refused = DiskSpec::parse("socket=/s,null=1M,discard=maybe", &[0]).unwrap_err();
        assert_eq!(refused.key, "discard");
    }

    #[test]
    fn needed_files_are_the_storage_s_then_each_layer_s() {
        let text = "path=/d/disk,base=/b/base,track-changes=on,encrypt=aes-xts,key-file=/k";
        assert_eq!(
            stack(text).needed_files(),
            [
                NeededFile::Image("/d/disk".into()),
                NeededFile::Base("/b/base".into()),
                NeededFile::ThinMap("/d/disk.map".into()),
                NeededFile::Changes("/d/disk.changes".into()),
                NeededFile::Key("/k".into()),
            ]
        );
        assert!(stack("null=1M").needed_files().is_empty());
        assert!(stack("rbd=p/i,cache=1M").needed_files().is_empty());
    }

    #[test]
    fn an_nbd_base_is_connected_to_and_needs_no_file() {
        let text = "path=/d/disk,base=nbd+unix:///golden?socket=/run/nbd.sock,base-timeout=5";
        let stack = stack(text);
        let StorageSpec::Thin {
            base: BaseSpec::Nbd { uri, timeout },
            ..
        } = &stack.storage
        else {
            panic!("not an NBD base: {:?}", stack.storage);
        };
        assert_eq!(
            (uri.export.as_str(), uri.socket.as_path()),
            ("golden", Path::new("/run/nbd.sock"))
        );
        assert_eq!(*timeout, Duration::from_secs(5));
        assert_eq!(
            stack.needed_files(),
            [
                NeededFile::Image("/d/disk".into()),
                NeededFile::ThinMap("/d/disk.map".into()),
            ]
        );
    }
}
