//! The double fetch: a guest thread rewrites a request in its memory while vbmq serves it,
//! over and over for a bounded time, turning a harmless request into a change (GETATTR into
//! SETATTR, an O_RDONLY open into O_RDWR|O_TRUNC). vbmq reads each request once, and a
//! read-only share refuses every change whatever it read: the share never changes. vbmq runs
//! as on a kernel without Landlock, which would refuse the truncating open on its own (not the
//! SETATTR: Landlock has no right for chmod). (On bfbac5c, the read-only check read the header
//! and flags, and the server read them again.)

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{
    self, FATTR_MODE, FATTR_SIZE, InHeader, Opcode, OpenIn, OpenOut, ROOT_ID, SetattrIn,
};
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestMemoryBackend};

use super::share::{FILE_LEN, Share};

const RACE_FOR: Duration = Duration::from_secs(3);

/// Serves `request` from slot 0 again and again while another thread stores `values` one
/// after the other, as fast as it can, into the request's 32-bit field at `offset`; after each
/// reply `after` sees it (the reply header's error and the bytes after it). Stops early when
/// the share changed.
fn race(
    share: &mut Share,
    client: &mut FsClient,
    request: &[u8],
    offset: usize,
    values: [u32; 2],
    mut after: impl FnMut(&mut FsClient, i32, &[u8]),
) -> u64 {
    let (req_at, reply_at) = FsClient::slot_addrs(0);
    let field = client
        .memory()
        .get_host_address(GuestAddress(req_at + offset as u64))
        .unwrap() as usize;
    assert_eq!(field % 4, 0);
    let file = share.dir.join("share/file");
    let stop = AtomicBool::new(false);
    let mut served = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: an aligned u32 in the guest memory this client maps for the whole race;
            // vbmq maps it too, hence an atomic.
            let field = unsafe { AtomicU32::from_ptr(field as *mut u32) };
            while !stop.load(Ordering::Relaxed) {
                for value in values {
                    field.store(value, Ordering::Relaxed);
                }
            }
        });
        let deadline = Instant::now() + RACE_FOR;
        while Instant::now() < deadline {
            client.submit(0, request, 4096).unwrap();
            client.kick().unwrap();
            let Some((_, written)) = client.wait(Duration::from_secs(10)) else {
                break;
            };
            served += 1;
            let mut reply = vec![0u8; written as usize];
            client
                .memory()
                .read_slice(&mut reply, GuestAddress(reply_at))
                .unwrap();
            if reply.len() >= 16 {
                let error = i32::from_le_bytes(reply[4..8].try_into().unwrap());
                after(client, error, &reply[16..]);
            }
            let meta = std::fs::metadata(&file).unwrap();
            if meta.len() != FILE_LEN as u64
                || std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777 == 0o777
            {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    served
}

fn header(opcode: Opcode, unique: u64, node: u64, body_len: usize) -> Vec<u8> {
    let header = InHeader {
        len: (size_of::<InHeader>() + body_len) as u32,
        opcode: opcode as u32,
        unique,
        nodeid: node,
        ..InHeader::default()
    };
    header.as_slice().to_vec()
}

#[test]
fn a_getattr_flipped_into_setattr_in_flight_changes_nothing() {
    let mut share = Share::start_without_landlock("race-setattr", true);
    let mut client = share.client();
    let file = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let setattr = SetattrIn {
        valid: FATTR_MODE | FATTR_SIZE,
        mode: 0o100_777,
        size: 0,
        ..SetattrIn::default()
    };
    let body = fuse::args(&setattr);
    let request = [header(Opcode::Getattr, 1, file, body.len()), body.to_vec()].concat();
    let served = race(
        &mut share,
        &mut client,
        &request,
        4,
        [Opcode::Getattr as u32, Opcode::Setattr as u32],
        |_, _, _| {},
    );
    share.check("GETATTR flipped into SETATTR", &mut client);
    assert!(served > 100, "only {served} requests served");
}

#[test]
fn a_read_only_open_flipped_into_a_truncating_one_in_flight_changes_nothing() {
    let mut share = Share::start_without_landlock("race-open", true);
    let mut client = share.client();
    let file = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let open = OpenIn {
        flags: libc::O_RDONLY as u32,
        fuse_flags: 0,
    };
    let body = fuse::args(&open);
    let request = [header(Opcode::Open, 1, file, body.len()), body.to_vec()].concat();
    let writing = (libc::O_RDWR | libc::O_TRUNC) as u32;
    let served = race(
        &mut share,
        &mut client,
        &request,
        size_of::<InHeader>(),
        [libc::O_RDONLY as u32, writing],
        |client, error, body| {
            // Each open that succeeded is released (slot 1: slot 0 is being flipped).
            if error == 0
                && let Some(out) = body
                    .get(..size_of::<OpenOut>())
                    .and_then(OpenOut::from_slice)
            {
                let fh = out.fh;
                let release = fuse::ReleaseIn {
                    fh,
                    ..Default::default()
                };
                let unique = client.next_unique();
                let request =
                    fuse::request(Opcode::Release, unique, file, fuse::args(&release), &[]);
                client.submit(1, &request, 4096).unwrap();
                client.kick().unwrap();
                client.wait(Duration::from_secs(10)).expect("RELEASE");
            }
        },
    );
    share.check("O_RDONLY flipped into O_RDWR|O_TRUNC", &mut client);
    assert!(served > 100, "only {served} requests served");
}
