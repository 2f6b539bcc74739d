//! `vbmq serve --fs` driven through its real socket by the user-space virtio-fs client: the data
//! and names a client sees are the host's, and a hostile guest's requests (names that climb out,
//! links that point out, made-up opcodes and nodes, lying lengths, buffers outside memory or too
//! small) each get an answer while the share keeps serving and nothing outside it is touched.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::fs::{refuses_a_writable_open, reply_data};
use crate::common::serve::serve_share;
use crate::common::{Daemon, Serve};
use vbmq_driver::fs_client::REPLY_ROOM;
use vbmq_driver::fuse::{self, EntryOut, Opcode, OutHeader, ROOT_ID};
use vbmq_driver::{Buffer, FsClient};
use vm_memory::{Bytes, GuestAddress};

const FILE_LEN: usize = 1 << 20;

struct Share {
    daemon: Daemon,
    dir: PathBuf,
}

impl Share {
    fn start(name: &str, extra: &str) -> Self {
        Self::start_with(name, extra, Command::new(env!("CARGO_BIN_EXE_vbmq")))
    }

    /// As [`Self::start`], vbmq started by `command` (`prlimit ... vbmq`, say).
    fn start_with(name: &str, extra: &str, command: Command) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-fs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("share/sub")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        std::fs::write(dir.join("share/file"), pattern()).unwrap();
        std::fs::write(dir.join("outside/secret"), b"not for guests").unwrap();
        symlink("../outside/secret", dir.join("share/link-out")).unwrap();
        let share_dir = dir.join("share");
        Self::spawn(dir, &share_dir, extra, command)
    }

    /// A second share of `source`'s directory (a migration's destination).
    fn sharing(source: &Share, name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("vbmq-fs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let command = Command::new(env!("CARGO_BIN_EXE_vbmq"));
        Self::spawn(dir, &source.dir.join("share"), "", command)
    }

    fn spawn(dir: PathBuf, share_dir: &Path, extra: &str, command: Command) -> Self {
        let daemon = serve_share(command, &dir, share_dir, extra);
        Share { daemon, dir }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("fs.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("vbmq.log")).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        self.daemon.alive()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let _ = self.daemon.child.kill();
        let _ = self.daemon.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pattern() -> Vec<u8> {
    (0..FILE_LEN)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 12) as u8)
        .collect()
}

fn errno(header: &OutHeader) -> i32 {
    -header.error
}

/// The share still answers a good request.
fn still_serves(client: &mut FsClient) {
    let entry = client
        .lookup(ROOT_ID, "file")
        .expect("lookup after the hostile request");
    assert_eq!(entry.attr.size, FILE_LEN as u64);
}

#[test]
fn a_client_reads_the_hosts_bytes_with_many_requests_in_flight() {
    let share = Share::start("read", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(
        client.getattr(entry.nodeid).unwrap().attr.size,
        FILE_LEN as u64
    );
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    let expected = pattern();
    // 32 reads of 4 KiB in flight at once, at distinct offsets.
    for slot in 0..32u16 {
        let offset = u64::from(slot) * 7 * 4096 % FILE_LEN as u64;
        let request = client.read_request(entry.nodeid, fh, offset, 4096);
        client.submit(slot, &request, 16 + 4096).unwrap();
    }
    client.kick().unwrap();
    let mut done = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.len() < 32 && Instant::now() < deadline {
        client.reap(&mut done);
    }
    assert_eq!(done.len(), 32);
    for (slot, written) in done {
        assert_eq!(written, 16 + 4096, "slot {slot}");
        let (_, reply_at) = FsClient::slot_addrs(slot);
        let mut data = vec![0u8; 4096];
        client
            .memory()
            .read_slice(&mut data, GuestAddress(reply_at + 16))
            .unwrap();
        let offset = usize::from(slot) * 7 * 4096 % FILE_LEN;
        assert!(data == expected[offset..offset + 4096], "slot {slot}");
    }
    client.release(entry.nodeid, fh).unwrap();

    // SIGUSR1 prints each queue's count: INIT, LOOKUP, GETATTR, OPEN, 32 READs and RELEASE
    // went to the request queue.
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(share.daemon.child.id().cast_signed(), libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !share.log().contains("[queue 1: requests=") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = share.log();
    let requests: u64 = log
        .split("[queue 1: requests=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no statistics: {log}"));
    assert_eq!(requests, 37, "{log}");
}

#[test]
fn hostile_names_links_and_nodes_stay_inside_the_share() {
    let mut share = Share::start("names", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    // `..` of the root is the root.
    let up = client.lookup(ROOT_ID, "..").unwrap();
    assert_eq!(up.nodeid, ROOT_ID);
    let sub = client.lookup(ROOT_ID, "sub").unwrap();
    let up_from_sub = client.lookup(sub.nodeid, "..").unwrap();
    assert_eq!(up_from_sub.nodeid, ROOT_ID);
    assert!(client.lookup(up.nodeid, "outside").is_err());
    // No name with a slash.
    let err = client.lookup(ROOT_ID, "../outside/secret").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    // A link pointing out is a link: it is not followed, and cannot be opened.
    let link = client.lookup(ROOT_ID, "link-out").unwrap();
    assert_eq!(link.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert!(client.open(link.nodeid, libc::O_RDONLY as u32).is_err());
    // Nodes never handed out.
    for node in [0, 999, 12345, u64::MAX] {
        assert!(client.getattr(node).is_err(), "node {node}");
        assert!(
            client.open(node, libc::O_RDONLY as u32).is_err(),
            "node {node}"
        );
    }
    client.forget(987_654, 1).unwrap();
    still_serves(&mut client);
    assert!(share.alive(), "{}", share.log());
    assert_eq!(
        std::fs::read(share.dir.join("outside/secret")).unwrap(),
        b"not for guests"
    );
}

#[test]
fn malformed_requests_get_an_answer_and_the_queue_goes_on() {
    let mut share = Share::start("malformed", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();

    // Opcodes with no meaning, among them the gaps of the FUSE numbering: ENOSYS.
    for opcode in [0u32, 7, 19, 50, 4096, u32::MAX] {
        let unique = client.next_unique();
        let mut request = fuse::request(Opcode::Getattr, unique, ROOT_ID, &[0u8; 16], &[]);
        request[4..8].copy_from_slice(&opcode.to_le_bytes());
        client.submit(0, &request, 4096).unwrap();
        client.kick().unwrap();
        let (_, written) = client.wait(Duration::from_secs(5)).expect("an answer");
        assert_eq!(written, 16, "opcode {opcode}");
        let header = client.reply_header(0).unwrap();
        assert_eq!(errno(&header), libc::ENOSYS, "opcode {opcode}");
        assert_eq!(header.unique, unique);
    }
    still_serves(&mut client);

    // A header claiming more bytes than the chain holds, and one claiming fewer than a header.
    for claimed in [u32::MAX, 1 << 20, 3] {
        let unique = client.next_unique();
        let mut request = fuse::request(Opcode::Lookup, unique, ROOT_ID, &[], &[b"file"]);
        request[0..4].copy_from_slice(&claimed.to_le_bytes());
        client.submit(0, &request, 4096).unwrap();
        client.kick().unwrap();
        assert!(
            client.wait(Duration::from_secs(5)).is_some(),
            "claimed {claimed}"
        );
    }
    still_serves(&mut client);

    // A reply buffer too small for the answer: nothing written past it.
    let (req_at, reply_at) = FsClient::slot_addrs(0);
    client
        .memory()
        .write_slice(&[0xeeu8; 64], GuestAddress(reply_at))
        .unwrap();
    let unique = client.next_unique();
    let request = fuse::request(Opcode::Lookup, unique, ROOT_ID, &[], &[b"file"]);
    client.submit(0, &request, 8).unwrap();
    client.kick().unwrap();
    let (_, written) = client.wait(Duration::from_secs(5)).expect("an answer");
    assert!(written <= 8, "{written}");
    let mut after = [0u8; 56];
    client
        .memory()
        .read_slice(&mut after, GuestAddress(reply_at + 8))
        .unwrap();
    assert_eq!(after, [0xeeu8; 56]);
    still_serves(&mut client);

    // Buffers outside guest memory, or the wrong way round: returned with nothing written.
    let layouts = [
        vec![
            Buffer::readable(1 << 40, 64),
            Buffer::writable(reply_at, 4096),
        ],
        vec![
            Buffer::readable(req_at, 64),
            Buffer::writable(1 << 40, 4096),
        ],
        vec![
            Buffer::readable(req_at, 64),
            Buffer::readable(reply_at, 4096),
        ],
        vec![Buffer::writable(req_at, 64)],
        vec![
            Buffer::readable(req_at, 0),
            Buffer::writable(reply_at, 4096),
        ],
    ];
    client
        .memory()
        .write_slice(&request, GuestAddress(req_at))
        .unwrap();
    for (i, buffers) in layouts.iter().enumerate() {
        client.submit_buffers(0, buffers);
        client.kick().unwrap();
        let (_, written) = client.wait(Duration::from_secs(5)).expect("an answer");
        assert_eq!(written, 0, "layout {i}");
    }
    still_serves(&mut client);

    // A read asking for far more than the reply can hold: an error, not an overflow.
    let entry: EntryOut = client.lookup(ROOT_ID, "file").unwrap();
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    let request = client.read_request(entry.nodeid, fh, 0, u32::MAX);
    client.submit(0, &request, REPLY_ROOM as u32).unwrap();
    client.kick().unwrap();
    let (_, written) = client.wait(Duration::from_secs(5)).expect("an answer");
    assert!(written as u64 <= REPLY_ROOM);
    still_serves(&mut client);
    assert!(share.alive(), "{}", share.log());
}

#[test]
fn a_read_only_share_answers_erofs() {
    let share = Share::start("ro", ",readonly=on");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    refuses_a_writable_open(&mut client);
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    client.release(entry.nodeid, fh).unwrap();
    let (out, _) = client
        .call(Opcode::Unlink, ROOT_ID, &[], &[b"file"], 4096)
        .unwrap();
    assert_eq!(errno(&out), libc::EROFS);
    assert!(Path::new(&share.dir.join("share/file")).exists());
}

/// A handle opened with `O_PATH` cannot take the flags of a READ (`fcntl` fails): the request
/// is refused, and the handle's descriptor stays open. fuse-backend-rs closed it on that path
/// (PATCHES.md, fuse-backend-rs #3), so the next file opened got its number and the first
/// handle's RELEASE closed that file under the guest.
#[test]
fn a_handle_the_host_cannot_use_is_refused_without_closing_it() {
    let mut share = Share::start("opath", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let path_handle = client
        .open(entry.nodeid, (libc::O_PATH | libc::O_RDONLY) as u32)
        .unwrap();
    let request = client.read_request(entry.nodeid, path_handle, 0, 4096);
    client.submit(0, &request, 16 + 4096).unwrap();
    client.kick().unwrap();
    client.wait(Duration::from_secs(5)).expect("an answer");
    assert_ne!(client.reply_header(0).unwrap().error, 0);
    // A second handle, then the first one's release: the second must still read.
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    client.release(entry.nodeid, path_handle).unwrap();
    let request = client.read_request(entry.nodeid, fh, 4096, 4096);
    client.submit(0, &request, 16 + 4096).unwrap();
    client.kick().unwrap();
    let (_, written) = client.wait(Duration::from_secs(5)).expect("an answer");
    let header = client.reply_header(0).unwrap();
    assert_eq!((header.error, written), (0, 16 + 4096), "{header:?}");
    let data = reply_data(&client);
    assert!(data == pattern()[4096..8192]);
    still_serves(&mut client);
    assert!(share.alive(), "{}", share.log());
}

/// Shares come from `--config` too (`fs = [...]`); a bad one is refused at start, naming its key.
#[test]
fn a_share_from_the_config_file_is_served_and_a_bad_one_refused() {
    let dir = std::env::temp_dir().join(format!("vbmq-fs-{}-config", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share")).unwrap();
    std::fs::write(dir.join("share/file"), b"from the config").unwrap();
    let socket = dir.join("fs.sock");
    let config = dir.join("vbmq.toml");
    std::fs::write(
        &config,
        format!(
            "fs = [\"socket={},dir={},tag=t,mode=event\"]\n",
            socket.display(),
            dir.join("share").display()
        ),
    )
    .unwrap();
    let daemon = Serve::config(&config, &[&socket])
        .log(&dir.join("vbmq.log"))
        .start();
    let mut client = FsClient::connect(&socket).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    assert_eq!(entry.attr.size, 15);
    drop(client);
    assert!(daemon.terminate().success());

    std::fs::write(&config, "fs = [\"socket=/tmp/x.sock,dir=/tmp,tag=\"]\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vbmq"))
        .args(["serve", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--fs tag:"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A frontend that goes away (its VM rebooted or died) takes its FUSE session with it: the
/// descriptors its lookups and opens held are closed, so reconnecting guests leak nothing.
#[test]
fn a_frontend_that_goes_leaves_no_descriptors_behind() {
    let mut share = Share::start("session", "");
    for i in 0..50 {
        std::fs::write(share.dir.join(format!("share/sub/f{i}")), b"x").unwrap();
    }
    let fds = |share: &Share| {
        std::fs::read_dir(format!("/proc/{}/fd", share.daemon.child.id()))
            .unwrap()
            .count()
    };
    let session = |share: &Share| {
        let mut client = FsClient::connect(&share.socket()).unwrap();
        let sub = client.lookup(ROOT_ID, "sub").unwrap();
        for i in 0..50 {
            let entry = client.lookup(sub.nodeid, &format!("f{i}")).unwrap();
            client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
        }
    };
    let settle = |share: &Share, want: usize| {
        let deadline = Instant::now() + Duration::from_secs(5);
        while fds(share) != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        fds(share)
    };
    session(&share);
    // The first connection made what stays (the listener's state, the root): the baseline.
    std::thread::sleep(Duration::from_millis(200));
    let baseline = fds(&share);
    for _ in 0..3 {
        session(&share);
        assert_eq!(settle(&share, baseline), baseline, "{}", share.log());
    }
    assert!(share.alive());
}

/// A GETXATTR or LISTXATTR may ask for up to 4 GiB; no xattr is longer than 64 KiB, and that is
/// all vbmq allocates (fuse-backend-rs allocated what the guest asked: PATCHES.md #5). Under a
/// 1 GiB address-space limit the old code aborted the process.
#[test]
fn xattr_requests_cannot_make_vbmq_allocate_what_the_guest_asks() {
    let mut limited = Command::new("prlimit");
    limited
        .arg("--as=1073741824")
        .arg(env!("CARGO_BIN_EXE_vbmq"));
    let mut share = Share::start_with("xattr", "", limited);
    let mut client = FsClient::connect(&share.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let huge = u32::MAX.to_le_bytes();
    let getxattr_in = [&huge[..], &[0u8; 4]].concat();
    for (opcode, names) in [
        (Opcode::Getxattr, vec![&b"user.nothing"[..]]),
        (Opcode::Listxattr, vec![]),
    ] {
        let (out, _) = client
            .call(opcode, entry.nodeid, &getxattr_in, &names, 4096)
            .unwrap();
        // An answer, whatever it is (ENODATA, ERANGE or the names).
        assert!(out.unique != 0, "{opcode:?}: no reply");
    }
    still_serves(&mut client);
    assert!(share.alive(), "{}", share.log());
}

/// A driver that breaks its ring (an avail index further ahead than the ring holds): the queue
/// stops, said once, and the connection is closed so that the frontend notices and resets the
/// device; the next frontend is served.
#[test]
fn a_ring_the_driver_broke_ends_the_connection_and_the_next_is_served() {
    let mut share = Share::start("broken-ring", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    still_serves(&mut client);
    let bad = client
        .avail_idx()
        .wrapping_add(vbmq_driver::fs_client::QUEUE_SIZE + 1);
    client.publish_avail_idx(bad).unwrap();
    assert!(
        client.closed_by_backend(Duration::from_secs(5)),
        "the queue stopped but the connection stayed open:\n{}",
        share.log()
    );
    assert_eq!(
        share
            .log()
            .matches("queue stopped, closing the connection")
            .count(),
        1,
        "{}",
        share.log()
    );
    drop(client);
    assert!(share.alive());
    let mut next = FsClient::connect(&share.socket()).unwrap();
    still_serves(&mut next);
}

/// The pages whose bits are set in a dirty log.
fn dirty_pages(log: &std::fs::File) -> Vec<u64> {
    use std::os::unix::fs::FileExt;
    let mut bits = vec![0u8; log.metadata().unwrap().len() as usize];
    log.read_exact_at(&mut bits, 0).unwrap();
    (0..bits.len() as u64 * 8)
        .filter(|&page| bits[(page / 8) as usize] & (1 << (page % 8)) != 0)
        .collect()
}

/// Reads `pages` pages of "file" through slot 0 and returns the guest pages the reply spans.
fn read_pages(client: &mut FsClient, node: u64, fh: u64, pages: u32) -> Vec<u64> {
    let request = client.read_request(node, fh, 0, pages * 4096);
    client.submit(0, &request, 16 + pages * 4096).unwrap();
    client.kick().unwrap();
    let (_, written) = client.wait(Duration::from_secs(10)).expect("a reply");
    assert_eq!(written, 16 + pages * 4096);
    let (_, reply_at) = FsClient::slot_addrs(0);
    (reply_at / 4096..(reply_at + u64::from(written)).div_ceil(4096)).collect()
}

#[test]
fn a_migrating_frontend_sees_every_page_a_reply_wrote_in_its_log() {
    let share = Share::start("dirty-log", "");
    let mut client = FsClient::connect(&share.socket()).unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    // One bit per 4 KiB page of the client's 64 MiB.
    let log = tempfile::tempfile().unwrap();
    log.set_len(4096).unwrap();
    client.log_dirty_pages(Some(&log)).unwrap();
    let reply = read_pages(&mut client, entry.nodeid, fh, 3);
    let dirty = dirty_pages(&log);
    for page in &reply {
        assert!(
            dirty.contains(page),
            "reply page {page} not in {dirty:?}: {}",
            share.log()
        );
    }
    let used = client.used_ring() / 4096;
    assert!(
        dirty.contains(&used),
        "used ring page {used} not in {dirty:?}"
    );
    // Logging off (a cancelled migration): nothing is marked any more.
    client.log_dirty_pages(None).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&log, &[0; 4096], 0).unwrap();
    read_pages(&mut client, entry.nodeid, fh, 2);
    assert_eq!(dirty_pages(&log), Vec::<u64>::new());
}

#[test]
fn a_share_state_moves_to_a_destination_and_the_open_file_goes_on_working() {
    let source = Share::start("state-src", "");
    let mut client = FsClient::connect(&source.socket()).unwrap();
    let sub = client.lookup(ROOT_ID, "sub").unwrap();
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let fh = client.open(entry.nodeid, libc::O_RDONLY as u32).unwrap();
    let state = client
        .save_state()
        .unwrap_or_else(|e| panic!("save: {e}: {}", source.log()));

    let mut destination = Share::sharing(&source, "state-dst");
    let mut moved = FsClient::connect_without_init(&destination.socket()).unwrap();
    // A state cut short: refused, and the share goes on serving, with nothing held.
    let cut = moved.load_state(&state[..state.len() - 1]);
    assert!(cut.is_err(), "a truncated state was loaded");
    let (out, _) = moved
        .call(Opcode::Getattr, entry.nodeid, &[0; 16], &[], 4096)
        .unwrap();
    assert_eq!(out.error, -libc::EIO, "a session began without INIT");
    moved.load_state(&state).unwrap();
    // The guest's inode numbers and open handle are valid on the destination.
    let expected = pattern();
    let request = moved.read_request(entry.nodeid, fh, 4096, 4096);
    moved.submit(0, &request, 16 + 4096).unwrap();
    moved.kick().unwrap();
    let (_, written) = moved.wait(Duration::from_secs(10)).expect("a reply");
    assert_eq!(written, 16 + 4096, "{}", destination.log());
    let mut data = vec![0u8; 4096];
    let (_, reply_at) = FsClient::slot_addrs(0);
    moved
        .memory()
        .read_slice(&mut data, GuestAddress(reply_at + 16))
        .unwrap();
    assert!(data == expected[4096..8192]);
    assert_eq!(moved.getattr(sub.nodeid).unwrap().attr.ino, sub.attr.ino);
    moved.release(entry.nodeid, fh).unwrap();
    assert!(destination.alive(), "{}", destination.log());
}
