//! One layer of a disk's stack as data: its kind and typed options (see `stack_spec`), and the
//! keys of the layers that parse their own.

use std::path::PathBuf;
use std::time::Duration;

use super::on_off::on_off;
use super::spec_error::SpecError;

/// One layer over the storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerSpec {
    /// `track-changes=on`: changed blocks recorded in `DISK.changes`.
    TrackChanges {
        /// `track-block=`.
        block: Option<u64>,
    },
    /// `encrypt=aes-xts`: ciphertext below, plaintext above.
    Encrypt {
        /// `key-file=`.
        key_file: PathBuf,
        /// `encrypt-discard=on`.
        discard: bool,
    },
    /// `cache=`: a DRAM read cache.
    Cache {
        /// Bytes.
        bytes: u64,
        /// `cache-preload=on`.
        preload: bool,
    },
    /// `discard=off`: neither discard nor write-zeroes offered.
    DiscardOff,
    /// `delay-us=` (tests): every Nth completion held.
    Delay {
        /// How long.
        delay: Duration,
        /// `delay-every=`.
        every: u64,
    },
}

/// A file a layer opens (see `NeededFile`).
pub(super) enum LayerFile {
    /// The changed-block maps, beside the image.
    Changes,
    /// The key file or pipe.
    Key(PathBuf),
}

impl LayerSpec {
    /// The file it opens, if any.
    pub(super) fn file(&self) -> Option<LayerFile> {
        match self {
            LayerSpec::TrackChanges { .. } => Some(LayerFile::Changes),
            LayerSpec::Encrypt { key_file, .. } => Some(LayerFile::Key(key_file.clone())),
            LayerSpec::Cache { .. } | LayerSpec::DiscardOff | LayerSpec::Delay { .. } => None,
        }
    }

    /// A key of a layer that keeps no field of its own in [`DiskSpec`](super::DiskSpec)
    /// (`discard=`): sets the layer in `layers`, in place of what the key said before; whether
    /// it is such a key. A new layer's keys go here.
    pub(super) fn set_key(
        layers: &mut Vec<LayerSpec>,
        key: &str,
        value: &str,
    ) -> Result<bool, SpecError> {
        let layer = match key {
            "discard" => (!on_off(key, value)?).then_some(LayerSpec::DiscardOff),
            _ => return Ok(false),
        };
        layers.retain(|set| set.key() != Some(key));
        layers.extend(layer);
        Ok(true)
    }

    /// The key that sets it, for the layers [`LayerSpec::set_key`] parses.
    fn key(&self) -> Option<&'static str> {
        match self {
            LayerSpec::DiscardOff => Some("discard"),
            LayerSpec::TrackChanges { .. }
            | LayerSpec::Encrypt { .. }
            | LayerSpec::Cache { .. }
            | LayerSpec::Delay { .. } => None,
        }
    }
}
