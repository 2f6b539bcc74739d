//! A queue's engine under an export, on a real image: a write to a block not saved yet is
//! held (the disk unchanged) until the engine has read the block's old contents, and a write
//! to a block another thread is saving is held, never waited for on the queue's thread.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::claims::Claimed;
use super::{COPY_BLOCK, Fleece, SnapshotDisk};
use crate::backend::staging::Staging;
use crate::backend::{Disk, Engine, EngineOptions, FileDisk, IoOp};
use crate::host_size;
use crate::nbd::Export;

const OLD: u8 = 0x11;
const NEW: u8 = 0xEE;

/// A 1 MiB image of `OLD` under an export begun now; the image read directly.
fn exported(dir: &Path) -> (SnapshotDisk, Arc<Fleece>, File) {
    let path = dir.join("a.raw");
    std::fs::write(&path, vec![OLD; 1 << 20]).unwrap();
    let disk = SnapshotDisk::over_file(FileDisk::open(&path, false, false).unwrap()).unwrap();
    let scratch = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(dir.join("scratch"))
        .unwrap();
    let fleece = disk.begin_export(scratch).unwrap();
    (disk, fleece, File::open(&path).unwrap())
}

fn engine(disk: &SnapshotDisk) -> Box<dyn Engine> {
    disk.engine(EngineOptions {
        depth: 8,
        batch: true,
        notify: false,
    })
    .unwrap()
}

/// Pushes a write of 4 KiB of `NEW` at `offset` as `tag`; the buffer lives until reaped.
fn push_write(engine: &mut dyn Engine, offset: u64, tag: u64) -> Staging {
    let mut buffer = Staging::new(4096).unwrap();
    buffer.bytes(4096).fill(NEW);
    let iov = buffer.list(4096);
    engine.push(IoOp::Write { offset, iov }, tag).unwrap();
    engine.submit().unwrap();
    buffer
}

fn byte_at(image: &File, offset: u64) -> u8 {
    let mut one = [0];
    image.read_exact_at(&mut one, offset).unwrap();
    one[0]
}

/// The export's view of `block`: every byte `OLD`.
fn export_keeps_old(fleece: &Fleece, block: u64) -> bool {
    let mut view = vec![0; host_size(COPY_BLOCK)];
    fleece.read(block * COPY_BLOCK, &mut view).unwrap();
    view.iter().all(|&b| b == OLD)
}

/// Reaps until `tag` completes; returns its result.
fn reap_until(engine: &mut dyn Engine, tag: u64) -> i32 {
    for _ in 0..1000 {
        let mut result = None;
        engine.reap(&mut |t, r| {
            if t == tag {
                result = Some(r);
            }
        });
        if let Some(r) = result {
            return r;
        }
        engine.wait().unwrap();
    }
    panic!("operation {tag} never completed");
}

#[test]
fn a_write_is_held_until_its_block_is_read_and_the_export_keeps_the_old_block() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (disk, fleece, image) = exported(dir.path());
    let mut engine = engine(&disk);
    let at = COPY_BLOCK + 4096;
    let _buffer = push_write(engine.as_mut(), at, 7);
    assert_eq!(byte_at(&image, at), OLD, "held until the old block is read");
    assert_eq!(reap_until(engine.as_mut(), 7), 4096);
    assert_eq!(byte_at(&image, at), NEW);
    assert_eq!(fleece.saved_blocks(), 1);
    assert!(export_keeps_old(&fleece, 1), "the export shows the instant");
    // Saved once: a second write to the block goes straight below.
    let _again = push_write(engine.as_mut(), at + 4096, 8);
    assert_eq!(reap_until(engine.as_mut(), 8), 4096);
    assert_eq!(fleece.saved_blocks(), 1);
    disk.end_export();
}

#[test]
fn a_write_to_a_block_another_thread_saves_is_held_while_the_queue_serves() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let (disk, fleece, image) = exported(dir.path());
    let mut engine = engine(&disk);
    // Another thread (another queue, the export's reader) holds block 2.
    let session = disk.shared.session().unwrap();
    let held = 2 * COPY_BLOCK;
    assert_eq!(session.claim(held, 1), Claimed::Runs(vec![(2, 1)]));
    let _buffer = push_write(engine.as_mut(), held, 9);
    // The queue goes on: a read completes while the write is held.
    let mut read = Staging::new(4096).unwrap();
    let iov = read.list(4096);
    engine.push(IoOp::Read { offset: 0, iov }, 10).unwrap();
    engine.submit().unwrap();
    assert_eq!(reap_until(engine.as_mut(), 10), 4096);
    assert_eq!(
        byte_at(&image, held),
        OLD,
        "held while another thread saves"
    );
    // That thread saves the block and lets it go: the write goes on.
    let mut old = vec![0; host_size(COPY_BLOCK)];
    image.read_exact_at(&mut old, held).unwrap();
    session.saved(2, 1, &old);
    assert_eq!(reap_until(engine.as_mut(), 9), 4096);
    assert_eq!(byte_at(&image, held), NEW);
    assert!(export_keeps_old(&fleece, 2), "the export shows the instant");
    disk.end_export();
}
