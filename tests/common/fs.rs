//! Requests a test sends through the user-space virtio-fs client, and what it reads back.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use vbmq_driver::FsClient;
use vbmq_driver::fuse::{self, CreateIn, Opcode, OutHeader, ROOT_ID, SetxattrIn};
use vm_memory::{ByteValued, Bytes, GuestAddress};

/// What a hostile frontend must not change in a file outside its share: mode, owner, and the
/// modification and change times (reads move the access time; a change of anything moves the
/// change time).
#[derive(Debug, PartialEq)]
pub struct Inode {
    mode: u32,
    owner: (u32, u32),
    times: (i64, i64, i64, i64),
}

impl Inode {
    pub fn of(meta: &Metadata) -> Inode {
        Inode {
            mode: meta.mode(),
            owner: (meta.uid(), meta.gid()),
            times: (
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
            ),
        }
    }
}

/// CREATE of `name` in the share's root, read-write, with `mode`: the reply's header and body.
pub fn create(client: &mut FsClient, name: &str, mode: u32) -> (OutHeader, Vec<u8>) {
    let create = CreateIn {
        flags: (libc::O_CREAT | libc::O_RDWR) as u32,
        mode,
        ..CreateIn::default()
    };
    let args = fuse::args(&create);
    client
        .call(Opcode::Create, ROOT_ID, args, &[name.as_bytes()], 4096)
        .expect("create")
}

/// A writable open of the root's `file` gets EROFS: the share is read-only.
pub fn refuses_a_writable_open(client: &mut FsClient) {
    let entry = client.lookup(ROOT_ID, "file").unwrap();
    let err = client
        .open(entry.nodeid, libc::O_RDWR as u32)
        .expect_err("a writable open of a read-only share");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
}

/// The 4096 data bytes of the reply in slot 0 (behind its 16-byte header).
pub fn reply_data(client: &FsClient) -> Vec<u8> {
    let (_, reply_at) = FsClient::slot_addrs(0);
    let mut data = vec![0u8; 4096];
    let at = GuestAddress(reply_at + 16);
    client.memory().read_slice(&mut data, at).unwrap();
    data
}

/// The file names in `dir`, sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The body of a SETXATTR request: the header, `name` and its NUL, then `value`.
pub fn setxattr_args(name: &str, value: &[u8]) -> Vec<u8> {
    let set = SetxattrIn {
        size: u32::try_from(value.len()).expect("a short value"),
        flags: 0,
    };
    let mut args = set.as_slice().to_vec();
    args.extend_from_slice(name.as_bytes());
    args.push(0);
    args.extend_from_slice(value);
    args
}
