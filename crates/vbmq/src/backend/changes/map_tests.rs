//! The maps in memory and through their file: exact extents, a clean restart, a kill, damage.

use super::*;
use crate::host_size;

const BLOCK: u64 = 64 << 10;
/// Ten blocks and a short one.
const CAPACITY: u64 = 10 * BLOCK + 4096;

fn image(dir: &Path) -> PathBuf {
    let path = dir.join("vm.raw");
    std::fs::write(&path, vec![0u8; host_size(CAPACITY)]).unwrap();
    path
}

/// Opens the map as vbmq does: the image opened (its time taken) first.
fn open(image: &Path, capacity: u64, block_size: Option<u64>) -> io::Result<ChangeMap> {
    ChangeMap::open(
        image,
        ImageFile::new(File::open(image)?),
        capacity,
        block_size,
    )
}

fn extents(map: &ChangeMap, name: &str) -> Vec<(u64, u64)> {
    map.changed_since(name).unwrap().extents
}

#[test]
fn extents_are_the_blocks_written_since_each_map_began_merged() {
    let dir = tempfile::tempdir().unwrap();
    let map = open(&image(dir.path()), CAPACITY, None).unwrap();
    map.mark(0, 4096); // before any map: in none
    map.begin("a").unwrap();
    map.mark(BLOCK + 512, 512);
    map.mark(2 * BLOCK - 1, 2); // blocks 1 and 2
    map.begin("b").unwrap();
    map.mark(10 * BLOCK, 4096); // the short last block
    map.mark(5 * BLOCK, 0); // nothing
    map.mark(20 * BLOCK, 4096); // past the end: nothing
    assert_eq!(
        extents(&map, "a"),
        vec![(BLOCK, 2 * BLOCK), (10 * BLOCK, 4096)]
    );
    assert_eq!(extents(&map, "b"), vec![(10 * BLOCK, 4096)]);
    let changes = map.changed_since("b").unwrap();
    assert_eq!((changes.block_size, changes.capacity), (BLOCK, CAPACITY));
    map.mark(0, CAPACITY);
    assert_eq!(extents(&map, "b"), vec![(0, CAPACITY)]);
    map.forget("b").unwrap();
    assert!(matches!(
        map.changed_since("b"),
        Err(ChangeError::Unknown(_))
    ));
    // A slot reused starts empty.
    map.begin("c").unwrap();
    assert_eq!(extents(&map, "c"), vec![]);
}

#[test]
fn names_are_checked_and_at_most_sixteen_live() {
    let dir = tempfile::tempdir().unwrap();
    let map = open(&image(dir.path()), CAPACITY, None).unwrap();
    for bad in ["", "a b", "../x", &"x".repeat(65)] {
        assert!(
            matches!(map.begin(bad), Err(ChangeError::Refused(_))),
            "{bad:?}"
        );
    }
    for i in 0..MAX_MAPS {
        map.begin(&format!("m{i}")).unwrap();
    }
    assert!(matches!(
        map.begin("one-more"),
        Err(ChangeError::Refused(_))
    ));
    assert!(matches!(map.begin("m3"), Err(ChangeError::Refused(_))));
    assert!(matches!(map.forget("nope"), Err(ChangeError::Unknown(_))));
}

#[test]
fn a_clean_close_keeps_the_maps_and_a_kill_makes_them_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let map = open(&image, CAPACITY, None).unwrap();
    map.begin("a").unwrap();
    map.mark(3 * BLOCK, BLOCK);
    map.close();
    drop(map);
    let map = open(&image, CAPACITY, None).unwrap();
    assert_eq!(extents(&map, "a"), vec![(3 * BLOCK, BLOCK)]);
    map.mark(7 * BLOCK, 1);
    assert_eq!(
        extents(&map, "a"),
        vec![(3 * BLOCK, BLOCK), (7 * BLOCK, BLOCK)]
    );
    // Not closed: as after kill -9.
    drop(map);
    let map = open(&image, CAPACITY, None).unwrap();
    let err = map.changed_since("a").unwrap_err().to_string();
    assert!(
        err.contains("invalid") && err.contains("did not stop cleanly since a"),
        "{err}"
    );
    assert_eq!(
        map.checkpoints()[0].invalid,
        Some(Invalid::Unclean.reason())
    );
    // Still invalid after a clean close; a new map works.
    map.begin("b").unwrap();
    map.mark(0, 1);
    map.close();
    drop(map);
    let map = open(&image, CAPACITY, None).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Invalid { .. })
    ));
    assert_eq!(extents(&map, "b"), vec![(0, BLOCK)]);
}

#[test]
fn damage_a_changed_image_or_another_size_never_gives_extents() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let closed = |extra: u64| {
        let map = open(&image, CAPACITY, None).unwrap();
        let _ = map.forget("a");
        map.begin("a").unwrap();
        map.mark(extra * BLOCK, 1);
        map.close();
    };
    let path = changes_path(&image);
    // A flipped bit in the bitmaps.
    closed(1);
    let mut raw = std::fs::read(&path).unwrap();
    raw[host_size(HEADER)] ^= 1;
    std::fs::write(&path, &raw).unwrap();
    let map = open(&image, CAPACITY, None).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Invalid { .. })
    ));
    drop(map);
    // A truncated file: its header is gone, so are its names.
    closed(2);
    let raw = std::fs::read(&path).unwrap();
    std::fs::write(&path, &raw[..100]).unwrap();
    let map = open(&image, CAPACITY, None).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Unknown(_))
    ));
    drop(map);
    // Garbage.
    std::fs::write(&path, vec![0xa5u8; 9000]).unwrap();
    let map = open(&image, CAPACITY, None).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Unknown(_))
    ));
    drop(map);
    // The image written while vbmq was not serving it.
    closed(3);
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&image, vec![1u8; host_size(CAPACITY)]).unwrap();
    let map = open(&image, CAPACITY, None).unwrap();
    let err = map.changed_since("a").unwrap_err().to_string();
    assert!(err.contains("modified"), "{err}");
    drop(map);
    // Another capacity, another block size.
    closed(4);
    let map = open(&image, CAPACITY + BLOCK, None).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Invalid { .. })
    ));
    drop(map);
    closed(5);
    let map = open(&image, CAPACITY, Some(4096)).unwrap();
    assert!(matches!(
        map.changed_since("a"),
        Err(ChangeError::Invalid { .. })
    ));
    assert_eq!(map.block_size(), 4096);
}

#[test]
fn a_map_file_that_is_a_link_or_not_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, changes_path(&image)).unwrap();
    assert!(open(&image, CAPACITY, None).is_err());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    std::fs::remove_file(changes_path(&image)).unwrap();
    std::fs::create_dir(changes_path(&image)).unwrap();
    assert!(open(&image, CAPACITY, None).is_err());
}

#[test]
fn a_grown_disk_counts_its_new_blocks_changed_and_keeps_late_marks() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let map = open(&image, CAPACITY, None).unwrap();
    map.begin("a").unwrap();
    map.mark(BLOCK, 1);
    let before = map.bits.current();
    map.grow(12 * BLOCK).unwrap();
    assert_eq!(map.capacity(), 12 * BLOCK);
    // The old short last block and the new ones changed.
    assert_eq!(
        extents(&map, "a"),
        vec![(BLOCK, BLOCK), (10 * BLOCK, 2 * BLOCK)]
    );
    // A write that saw the old size marks the old bitmap after the grow: still counted.
    super::set_range(before.existing(0).unwrap(), 3, 3);
    assert_eq!(
        extents(&map, "a"),
        vec![(BLOCK, BLOCK), (3 * BLOCK, BLOCK), (10 * BLOCK, 2 * BLOCK)]
    );
    // A map begun after the grow covers the new size, and starts empty.
    map.begin("b").unwrap();
    assert_eq!(extents(&map, "b"), vec![]);
    map.mark(11 * BLOCK + 5, 1);
    assert_eq!(extents(&map, "b"), vec![(11 * BLOCK, BLOCK)]);
    // Growing by nothing changes nothing; at most 8 grows while open (one done).
    map.grow(12 * BLOCK).unwrap();
    for i in 2..=8 {
        assert!(map.can_grow());
        map.grow((12 + i) * BLOCK).unwrap();
    }
    assert!(!map.can_grow());
    assert!(map.grow(30 * BLOCK).is_err());
    map.close();
    drop(map);
    // The file records the new size: the maps come back at it.
    let map = open(&image, 20 * BLOCK, None).unwrap();
    assert_eq!(
        extents(&map, "a"),
        vec![(BLOCK, BLOCK), (3 * BLOCK, BLOCK), (10 * BLOCK, 10 * BLOCK)]
    );
    assert_eq!(extents(&map, "b"), vec![(11 * BLOCK, 9 * BLOCK)]);
}

/// The image's time is read through the descriptor vbmq opened, never through its path: an
/// image written while vbmq was not serving it, then moved away and replaced at its path by a
/// file bearing the clean close's time, still turns the maps invalid.
#[test]
fn the_image_time_is_read_through_its_descriptor_not_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let image = image(dir.path());
    let map = open(&image, CAPACITY, None).unwrap();
    map.begin("a").unwrap();
    map.close();
    drop(map);
    let clean = std::fs::metadata(&image).unwrap().modified().unwrap();
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .unwrap();
    written.write_all_at(&[1], 0).unwrap();
    written
        .set_modified(clean + std::time::Duration::from_secs(1))
        .unwrap();
    let opened = ImageFile::new(File::open(&image).unwrap());
    std::fs::rename(&image, dir.path().join("moved.raw")).unwrap();
    let decoy = File::create(&image).unwrap();
    decoy.set_len(CAPACITY).unwrap();
    decoy.set_modified(clean).unwrap();
    let map = ChangeMap::open(&image, opened, CAPACITY, None).unwrap();
    let err = map.changed_since("a").unwrap_err().to_string();
    assert!(err.contains("modified"), "{err}");
}
