use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::ThinOptions;
use crate::backend::layer::Slab;
use crate::backend::{CachedDisk, Delay, Disk, EncryptedDisk, FileDisk, Layered, ThinDisk};

/// A thin disk filling from its base in the background, in `dir`.
fn filling_thin_disk(dir: &Path) -> Arc<ThinDisk> {
    let (base, data) = (dir.join("base.raw"), dir.join("disk.raw"));
    std::fs::File::create(&base)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    std::fs::File::create(&data).unwrap();
    let options = ThinOptions {
        fill: true,
        ..ThinOptions::default()
    };
    let base = FileDisk::open(&base, true, false).unwrap();
    let data_disk = FileDisk::open(&data, false, false).unwrap();
    let thin = ThinDisk::open(data_disk, &data, base, None, options).unwrap();
    assert!(thin.filling());
    Arc::new(thin)
}

/// Every layer passes `close` down: a thin disk under it stops its background fill at exit
/// (the cache once did not, and the fill thread and an RBD image's lock outlived it).
#[test]
fn every_layer_closes_the_disk_below() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, [7u8; 64]).unwrap();
    type Stack = fn(Arc<dyn Disk>, &Path, &Path) -> Arc<dyn Disk>;
    let stacks: [(&str, Stack); 4] = [
        ("cache", |below, data, _| {
            Arc::new(CachedDisk::open(below, data, 1 << 20, "close").unwrap())
        }),
        ("encrypt", |below, _, key| {
            Arc::new(EncryptedDisk::open(below, key, false).unwrap())
        }),
        ("delay", |below, _, _| {
            Arc::new(Layered::new(below, Delay::new(Duration::from_millis(1), 2)))
        }),
        ("all three", |below, data, key| {
            let crypt = Arc::new(EncryptedDisk::open(below, key, false).unwrap());
            let cache = Arc::new(CachedDisk::open(crypt, data, 1 << 20, "close").unwrap());
            Arc::new(Layered::new(cache, Delay::new(Duration::from_millis(1), 2)))
        }),
    ];
    for (name, stack) in stacks {
        let sub = dir.path().join(name.replace(' ', "-"));
        std::fs::create_dir(&sub).unwrap();
        let thin = filling_thin_disk(&sub);
        let disk = stack(thin.clone(), &sub.join("disk.raw"), &key);
        disk.close();
        assert!(
            !thin.filling(),
            "{name}: the thin disk below was not closed"
        );
    }
}

#[test]
fn a_slab_reuses_freed_indices_and_counts_its_values() {
    let mut slab = Slab::new();
    let (a, b) = (slab.insert("a"), slab.insert("b"));
    assert_eq!(slab.take(a), Some("a"));
    assert_eq!(slab.take(a), None);
    assert_eq!(slab.insert("c"), a);
    assert_eq!(slab.len(), 2);
    assert_eq!(slab.get(b), Some(&"b"));
    let mut drained = slab.drain();
    drained.sort_unstable();
    assert_eq!(drained, ["b", "c"]);
    assert!(slab.is_empty());
    assert_eq!(slab.take(b), None);
}
