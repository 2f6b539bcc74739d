//! The replies of one pass reach the guest together: vbmq publishes the used entries of every
//! request it took in a pass with one update of the used index, whose cache line a polling
//! driver keeps reading (an update per request pulls that line across CPUs each time).

use std::time::{Duration, Instant};

use crate::common::Daemon;
use crate::common::serve::serve_share;
use vbmq_driver::fuse::{self, Opcode, ROOT_ID, WriteIn};
use vbmq_driver::{Buffer, FsClient};
use vm_memory::{Bytes, GuestAddress};

/// A READ and a WRITE made available together are served in one pass. The WRITE's data is the
/// used ring's index field, so the file records the index as it stood while vbmq served the
/// WRITE: the READ before it in the same pass is not yet published. (Before the batch, each
/// request published its own entry: the file recorded the index after the READ.)
#[test]
fn the_replies_of_one_pass_are_published_with_one_used_index_update() {
    let dir = std::env::temp_dir().join(format!("vbmq-fs-{}-used-ring", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    std::fs::write(dir.join("share/file"), [0xaau8; 4096]).unwrap();
    let command = std::process::Command::new(env!("CARGO_BIN_EXE_vbmq"));
    let daemon: Daemon = serve_share(command, &dir, &dir.join("share"), "");
    let mut client = FsClient::connect(&dir.join("fs.sock")).unwrap();
    let node = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let fh = client.open(node, libc::O_RDWR as u32).unwrap();

    let read = client.read_request(node, fh, 0, 4096);
    let (read_at, read_reply) = FsClient::slot_addrs(0);
    client
        .memory()
        .write_slice(&read, GuestAddress(read_at))
        .unwrap();
    let read_chain = [
        Buffer::readable(read_at, read.len() as u32),
        Buffer::writable(read_reply, 16 + 4096),
    ];
    let used_idx = client.used_ring() + 2;
    let write_in = WriteIn {
        fh,
        offset: 0,
        size: 2,
        ..WriteIn::default()
    };
    let unique = client.next_unique();
    let mut write = fuse::request(Opcode::Write, unique, node, fuse::args(&write_in), &[]);
    // The header claims the data that follows in the next buffer.
    let claimed = write.len() as u32 + 2;
    write[0..4].copy_from_slice(&claimed.to_le_bytes());
    let (write_at, write_reply) = FsClient::slot_addrs(2);
    client
        .memory()
        .write_slice(&write, GuestAddress(write_at))
        .unwrap();
    let write_chain = [
        Buffer::readable(write_at, write.len() as u32),
        Buffer::readable(used_idx, 2),
        Buffer::writable(write_reply, 4096),
    ];
    let before: u16 = client.memory().read_obj(GuestAddress(used_idx)).unwrap();
    client.frame(0, &read_chain);
    client.frame(2, &write_chain);
    client.offer(&[0, 2]);
    client.kick().unwrap();

    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while done.len() < 2 {
        assert!(Instant::now() < deadline, "served only {done:?}");
        client.reap(&mut done);
        std::hint::spin_loop();
    }
    assert!(done.contains(&(0, 16 + 4096)), "the READ: {done:?}");
    let written = client.reply_header(2).unwrap();
    assert_eq!(written.error, 0, "the WRITE failed: {written:?}");
    let recorded = std::fs::read(dir.join("share/file")).unwrap();
    let seen = u16::from_le_bytes([recorded[0], recorded[1]]);
    assert_eq!(
        seen, before,
        "the used index moved from {before} to {seen} while the pass was still serving"
    );
    drop(client);
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
}
