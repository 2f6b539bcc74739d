//! Malformed FUSE: requests before INIT, lengths that lie, counts larger than their payloads,
//! names without their NUL, opcodes that do not exist, headers split anywhere. Each gets an
//! answer (or is returned empty), on a writable and on a read-only share.

use std::time::Duration;

use vbmq_driver::fuse::{
    self, BatchForgetIn, ForgetOne, InHeader, InitIn, Opcode, OpenIn, ROOT_ID, ReadIn, RenameIn,
    SetxattrIn, WriteIn,
};
use vbmq_driver::{Buffer, FsClient};
use vm_memory::{Bytes, GuestAddress};

use super::requests::{errno, put, raw_call};
use super::share::Share;

/// Sends `request` as it is and waits for the chain to come back; the reply is not checked
/// (any answer will do), only that there is one and nothing broke.
fn send(client: &mut FsClient, request: &[u8], what: &str) -> u32 {
    client.submit(0, request, 4096).unwrap();
    client.kick().unwrap();
    let (_, written) = client
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{what}: the chain was never returned"));
    assert!(written <= 4096, "{what}: {written} bytes written into 4096");
    written
}

/// What a case is, its opcode, arguments and names.
type Case<'a> = (&'a str, Opcode, &'a [u8], &'a [&'a [u8]]);

fn with_len(mut request: Vec<u8>, len: u32) -> Vec<u8> {
    request[0..4].copy_from_slice(&len.to_le_bytes());
    request
}

fn requests_before_init(readonly: bool) {
    let mut share = Share::start(&format!("before-init-{readonly}"), readonly);
    let mut client = FsClient::connect_without_init(&share.socket()).unwrap();
    let open = OpenIn {
        flags: (libc::O_RDWR | libc::O_TRUNC) as u32,
        fuse_flags: 0,
    };
    let read = ReadIn {
        size: 4096,
        ..ReadIn::default()
    };
    let cases: [Case; 6] = [
        ("lookup", Opcode::Lookup, &[], &[b"file"]),
        ("getattr", Opcode::Getattr, &[0u8; 16], &[]),
        ("open for writing", Opcode::Open, fuse::args(&open), &[]),
        ("read", Opcode::Read, fuse::args(&read), &[]),
        ("unlink", Opcode::Unlink, &[], &[b"file"]),
        ("destroy", Opcode::Destroy, &[], &[]),
    ];
    // An INIT the server refuses (major version 1) starts nothing either.
    let bad_init = InitIn {
        major: 1,
        ..InitIn::default()
    };
    let init_then = [(
        "a refused INIT",
        Opcode::Init,
        fuse::args(&bad_init),
        &[][..],
    )];
    for (what, opcode, args, names) in cases.into_iter().chain(init_then).chain(cases) {
        let unique = client.next_unique();
        let request = fuse::request(opcode, unique, ROOT_ID, args, names);
        send(&mut client, &request, what);
        if !matches!(opcode, Opcode::Init) {
            let out = client.reply_header(0).unwrap();
            assert_eq!((errno(&out), out.unique), (libc::EIO, unique), "{what}");
        }
        share.unchanged(what);
    }
    client.init().unwrap();
    share.check("requests before INIT", &mut client);
    // A second INIT in the same session.
    client.init().ok();
    share.check("a second INIT", &mut client);
}

#[test]
fn requests_before_init_get_an_answer_and_change_nothing() {
    requests_before_init(false);
    requests_before_init(true);
}

fn lies(readonly: bool) {
    let mut share = Share::start(&format!("lies-{readonly}"), readonly);
    let mut client = share.client();
    let file = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let sub = client.lookup(ROOT_ID, "sub").unwrap().nodeid;
    let fh = client.open(file, libc::O_RDONLY as u32).unwrap();
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();

    // Lengths that lie about the request.
    let lookup = fuse::request(Opcode::Lookup, 1, ROOT_ID, &[], &[b"inner"]);
    for len in [
        0,
        3,
        39,
        40,
        41,
        44,
        47,
        1000,
        1 << 20,
        (1 << 20) + 0x1001,
        u32::MAX,
    ] {
        cases.push((
            format!("LOOKUP claiming {len} bytes"),
            with_len(lookup.clone(), len),
        ));
    }
    // Shorter than a header, and a header alone for an opcode that needs arguments.
    cases.push(("39 bytes".into(), lookup[..39].to_vec()));
    for opcode in [
        Opcode::Lookup,
        Opcode::Setattr,
        Opcode::Open,
        Opcode::Write,
        Opcode::Rename,
    ] {
        let request = fuse::request(opcode, 1, file, &[], &[]);
        cases.push((format!("{opcode:?} without arguments"), request));
    }
    // Names without their NUL, empty, or missing.
    let mut no_nul = fuse::request(Opcode::Lookup, 1, ROOT_ID, &[], &[b"file"]);
    no_nul.pop();
    cases.push((
        "a name without NUL".into(),
        with_len(no_nul.clone(), no_nul.len() as u32),
    ));
    cases.push((
        "an empty name".into(),
        fuse::request(Opcode::Lookup, 1, ROOT_ID, &[], &[b""]),
    ));
    let rename = RenameIn { newdir: sub };
    let one_name = fuse::request(Opcode::Rename, 1, ROOT_ID, fuse::args(&rename), &[b"file"]);
    cases.push(("RENAME with one name".into(), one_name));
    cases.push((
        "SYMLINK with one name".into(),
        fuse::request(Opcode::Symlink, 1, ROOT_ID, &[], &[b"sl"]),
    ));
    // Counts larger than their payloads.
    let forget = BatchForgetIn {
        count: 1_000_000,
        dummy: 0,
    };
    let one = ForgetOne {
        nodeid: file,
        nlookup: 1,
    };
    let batch = [fuse::args(&forget), fuse::args(&one)].concat();
    cases.push((
        "BATCH_FORGET of 1000000 with one".into(),
        fuse::request(Opcode::BatchForget, 1, 0, &batch, &[]),
    ));
    let setxattr = SetxattrIn {
        size: 65536,
        flags: 0,
    };
    let mut value = fuse::args(&setxattr).to_vec();
    value.extend(b"user.big\0four");
    cases.push((
        "SETXATTR of 65536 with 4".into(),
        fuse::request(Opcode::Setxattr, 1, file, &value, &[]),
    ));
    let write = WriteIn {
        fh,
        offset: 0,
        size: 1 << 20,
        ..WriteIn::default()
    };
    let mut data = fuse::args(&write).to_vec();
    data.extend([0x5a; 8]);
    cases.push((
        "WRITE of 1 MiB with 8 bytes".into(),
        fuse::request(Opcode::Write, 1, file, &data, &[]),
    ));
    let read = ReadIn {
        fh,
        size: u32::MAX,
        ..ReadIn::default()
    };
    for opcode in [Opcode::Read, Opcode::Readdir, Opcode::Readdirplus] {
        cases.push((
            format!("{opcode:?} of 4 GiB"),
            fuse::request(opcode, 1, file, fuse::args(&read), &[]),
        ));
    }
    let ioctl = [
        fh.to_le_bytes().as_slice(),
        &[0; 4],
        &0x8008_6601u32.to_le_bytes(),
        &[0; 8],
        &u32::MAX.to_le_bytes(),
        &u32::MAX.to_le_bytes(),
    ]
    .concat();
    cases.push((
        "IOCTL with 4 GiB in".into(),
        fuse::request(Opcode::Ioctl, 1, file, &ioctl, &[]),
    ));

    for (what, mut request) in cases {
        let unique = client.next_unique();
        if request.len() >= 16 {
            request[8..16].copy_from_slice(&unique.to_le_bytes());
        }
        send(&mut client, &request, &what);
        share.check(&what, &mut client);
    }

    // Opcodes with no meaning (ENOSYS), and CUSE's and a byte-swapped INIT's numbers.
    for opcode in [0, 7, 19, 50, 53, 1000, 4096, 1 << 20, 436_207_616, u32::MAX] {
        let out = raw_call(&mut client, opcode, ROOT_ID, &[0u8; 40], &[]);
        assert!(out.is_some_and(|o| o.error != 0), "opcode {opcode}");
        share.check(&format!("opcode {opcode}"), &mut client);
    }

    // More header and arguments than the largest request (1 MiB and a page): ENOMEM, nothing
    // of it read.
    let (req_at, reply_at) = FsClient::slot_addrs(0);
    let unique = client.next_unique();
    let lookup = fuse::request(Opcode::Lookup, unique, ROOT_ID, &[], &[b"file"]);
    put(&client, &lookup, req_at);
    let buffers = [
        Buffer::readable(req_at, lookup.len() as u32),
        Buffer::readable(32 << 20, 2 << 20),
        Buffer::writable(reply_at, 4096),
    ];
    client.submit_wide(0, &buffers);
    client.kick().unwrap();
    client.wait(Duration::from_secs(10)).expect("an answer");
    let out = client.reply_header(0).unwrap();
    assert_eq!((errno(&out), out.unique), (libc::ENOMEM, unique));
    share.check("2 MiB of arguments", &mut client);

    // A header split over two descriptors at every byte: served like the whole one.
    let far = req_at + 2048;
    let lookup = fuse::request(Opcode::Lookup, 1, ROOT_ID, &[], &[b"file"]);
    for at in 1..size_of::<InHeader>() as u32 + 4 {
        let unique = client.next_unique();
        let mut request = lookup.clone();
        request[8..16].copy_from_slice(&unique.to_le_bytes());
        let at = at as usize;
        let memory = client.memory();
        memory
            .write_slice(&request[..at], GuestAddress(req_at))
            .unwrap();
        memory
            .write_slice(&request[at..], GuestAddress(far))
            .unwrap();
        let rest = (request.len() - at) as u32;
        let buffers = [
            Buffer::readable(req_at, at as u32),
            Buffer::readable(far, rest),
            Buffer::writable(reply_at, 4096),
        ];
        client.submit_wide(0, &buffers);
        client.kick().unwrap();
        let (_, written) = client.wait(Duration::from_secs(10)).expect("an answer");
        let out = client.reply_header(0).unwrap();
        assert_eq!((out.error, out.unique), (0, unique), "header split at {at}");
        assert!(written > 16, "header split at {at}");
        share.check(&format!("header split at {at}"), &mut client);
    }
    client.release(file, fh).unwrap();
    drop(client);
    share.check_anew("malformed, the end");
}

#[test]
fn lying_lengths_counts_names_and_opcodes_get_an_answer() {
    lies(false);
    lies(true);
}
