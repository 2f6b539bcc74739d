//! One layer of a disk's stack opened over the disk below, from its [`LayerSpec`] and the files
//! a client passed for it.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::handles::Handles;
use crate::backend::cache::ImageId;
use crate::backend::changes::ImageFile;
use crate::backend::{CachedDisk, Delay, DiscardOff, Disk, EncryptedDisk, Layered, TrackedDisk};
use crate::config::{LayerSpec, SpecError, StackSpec, StorageSpec};

/// What the layers take from outside their spec: each is taken by the one layer it is for.
#[derive(Default)]
pub(super) struct LayerInputs {
    /// `track-changes=on`: the image's time before it was opened and, for a passed image, a
    /// copy of its descriptor and the map file passed with it.
    pub tracked: Option<TrackedFiles>,
    /// `key-file=`: the key file or pipe, passed.
    pub key: Option<File>,
    /// `cache=` over a passed image: the cache's name for it.
    pub cache_id: Option<ImageId>,
    /// The disk's socket, naming its cache's statistics.
    pub label: String,
}

/// A tracked disk's image, opened (its time taken) before the disk is (none if it did not exist
/// yet), and for a passed image the map file passed with it (which it needs: a passed image is
/// never tracked from a map file opened here).
pub(super) type TrackedFiles = (Option<ImageFile>, Option<File>);

/// `layer` over `below`; the verbs it answers go to `handles`.
pub(super) fn open_layer(
    stack: &StackSpec,
    layer: &LayerSpec,
    below: Arc<dyn Disk>,
    inputs: &mut LayerInputs,
    handles: &mut Handles,
) -> Result<Arc<dyn Disk>, SpecError> {
    let disk: Arc<dyn Disk> = match layer {
        LayerSpec::TrackChanges { block } => {
            let tracked = open_tracked(stack, *block, below, inputs.tracked.take())?;
            handles.changes = Some(Arc::downgrade(&tracked.map()));
            Arc::new(tracked)
        }
        LayerSpec::Encrypt { key_file, discard } => Arc::new(open_encrypted(
            key_file,
            *discard,
            below,
            inputs.key.take(),
        )?),
        LayerSpec::Cache { bytes, preload } => {
            let cache_id = inputs.cache_id.take();
            Arc::new(open_cache(
                stack,
                *bytes,
                *preload,
                below,
                cache_id,
                &inputs.label,
            )?)
        }
        LayerSpec::DiscardOff => Arc::new(Layered::new(below, DiscardOff)),
        LayerSpec::Delay { delay, every } => {
            Arc::new(Layered::new(below, Delay::new(*delay, *every)))
        }
    };
    // Only what is above the snapshot layer can make its exports show another disk.
    if handles.snapshots.is_some() {
        if handles.export_refused.is_none() {
            handles.export_refused = disk.export_refused();
        }
        handles.export_views.push(Arc::downgrade(&disk));
    }
    Ok(disk)
}

fn path_error(key: &str, path: &Path, e: impl std::fmt::Display) -> SpecError {
    SpecError {
        key: key.into(),
        reason: format!("{}: {e}", path.display()),
    }
}

fn defect(key: &str) -> SpecError {
    SpecError {
        key: key.into(),
        reason: "refused by the parser: a defect".into(),
    }
}

/// Above the snapshot layer: what reaches the storage is what changed.
fn open_tracked(
    stack: &StackSpec,
    block: Option<u64>,
    below: Arc<dyn Disk>,
    tracked: Option<TrackedFiles>,
) -> Result<TrackedDisk, SpecError> {
    let path = stack.image().ok_or_else(|| defect("track-changes"))?;
    let (image, changes) = tracked.ok_or_else(|| defect("track-changes"))?;
    let image = match image {
        Some(image) => image,
        None => ImageFile::made(path).map_err(|e| path_error("track-changes", path, e))?,
    };
    match changes {
        Some(changes) => TrackedDisk::open_passed(below, path, image, changes, block),
        None => TrackedDisk::open(below, path, image, block),
    }
    .map_err(|e| path_error("track-changes", path, e))
}

/// Under the cache: the cache holds plaintext, in vbmq's memory only.
fn open_encrypted(
    key_file: &Path,
    discard: bool,
    below: Arc<dyn Disk>,
    passed: Option<File>,
) -> Result<EncryptedDisk, SpecError> {
    match passed {
        Some(file) => EncryptedDisk::with_key_from(below, file, discard),
        None => EncryptedDisk::open(below, key_file, discard),
    }
    .map_err(|e| path_error("key-file", key_file, e))
}

/// The DRAM read cache, shared by every disk of one image (named by `id` when passed).
fn open_cache(
    stack: &StackSpec,
    bytes: u64,
    preload: bool,
    below: Arc<dyn Disk>,
    id: Option<ImageId>,
    label: &str,
) -> Result<CachedDisk, SpecError> {
    let cache_error = |e: std::io::Error| SpecError {
        key: "cache".into(),
        reason: e.to_string(),
    };
    if let StorageSpec::Rbd(target) = &stack.storage {
        let name = format!("{}/{}/{}", target.pool, target.namespace, target.image);
        let id = ImageId::Rbd(format!("{}:{name}", target.conf.display()));
        return CachedDisk::open_image(below, id, &name, bytes, label).map_err(cache_error);
    }
    let path = stack.image().ok_or_else(|| defect("cache"))?;
    let cached = match id {
        Some(id) => {
            let name = path.display().to_string();
            CachedDisk::open_image(below, id, &name, bytes, label)
        }
        None => CachedDisk::open(below, path, bytes, label),
    }
    .map_err(cache_error)?;
    if preload {
        cached
            .preload(path)
            .map_err(|e| path_error("cache-preload", path, e))?;
    }
    Ok(cached)
}
