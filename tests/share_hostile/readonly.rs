//! Every opcode that could change a read-only share, each refused, with every argument that
//! matters: nothing in the share (nor outside it) changes, and the share goes on serving; as on
//! a kernel without Landlock, so that vbmq's own refusals are what is tested.

use vbmq_driver::fuse::{
    AccessIn, CopyFileRangeIn, CreateIn, FATTR_ATIME, FATTR_GID, FATTR_MODE, FATTR_MTIME,
    FATTR_MTIME_NOW, FATTR_SIZE, FATTR_UID, FallocateIn, LinkIn, MkdirIn, MknodIn, Opcode, ROOT_ID,
    Rename2In, RenameIn, SetattrIn, SetupmappingIn, SetxattrIn, WriteIn, args,
};

use super::requests::{errno, raw_call};
use super::share::Share;

/// Opcodes of newer kernels than fuse-backend-rs knows: SYNCFS, TMPFILE (makes a file),
/// STATX.
const NEWER_OPCODES: [u32; 3] = [50, 51, 52];

/// What a case is, its opcode, node, arguments and names, and the errno it must get (0: any
/// error).
type Case = (String, u32, u64, Vec<u8>, Vec<&'static [u8]>, i32);

#[test]
fn every_mutating_opcode_is_refused_and_nothing_changes() {
    let mut share = Share::start_without_landlock("ro-all", true);
    let mut client = share.client();
    let file = client.lookup(ROOT_ID, "file").unwrap().nodeid;
    let sub = client.lookup(ROOT_ID, "sub").unwrap().nodeid;
    let empty = client.lookup(ROOT_ID, "empty").unwrap().nodeid;
    let fh = client.open(file, libc::O_RDONLY as u32).unwrap();

    let mut cases: Vec<Case> = Vec::new();
    let mut case = |what: &str, op: Opcode, node, a: &[u8], names: Vec<&'static [u8]>, e| {
        cases.push((what.to_string(), op as u32, node, a.to_vec(), names, e));
    };
    for (what, valid) in [
        ("chmod", FATTR_MODE),
        ("chown", FATTR_UID | FATTR_GID),
        ("truncate", FATTR_SIZE),
        ("utimes", FATTR_ATIME | FATTR_MTIME),
        ("touch", FATTR_MTIME_NOW),
        ("truncate by handle", FATTR_SIZE | 0x40),
    ] {
        let setattr = SetattrIn {
            valid,
            fh,
            mode: 0o100_777,
            uid: 1234,
            gid: 1234,
            atime: 1,
            mtime: 1,
            ..SetattrIn::default()
        };
        case(
            what,
            Opcode::Setattr,
            file,
            args(&setattr),
            vec![],
            libc::EROFS,
        );
        case(
            what,
            Opcode::Setattr,
            ROOT_ID,
            args(&setattr),
            vec![],
            libc::EROFS,
        );
    }
    for flags in [
        libc::O_WRONLY,
        libc::O_RDWR,
        libc::O_ACCMODE,
        libc::O_RDONLY | libc::O_TRUNC,
        libc::O_WRONLY | libc::O_TRUNC,
        libc::O_RDWR | libc::O_APPEND,
        libc::O_WRONLY | libc::O_CREAT,
    ] {
        let open = vbmq_driver::fuse::OpenIn {
            flags: flags as u32,
            fuse_flags: 0,
        };
        let what = format!("open {flags:#o}");
        case(&what, Opcode::Open, file, args(&open), vec![], libc::EROFS);
        case(&what, Opcode::Opendir, sub, args(&open), vec![], 0);
    }
    for flags in [
        libc::O_RDONLY,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
    ] {
        let create = CreateIn {
            flags: flags as u32,
            mode: 0o644,
            umask: 0,
            fuse_flags: 0,
        };
        case(
            "create",
            Opcode::Create,
            ROOT_ID,
            args(&create),
            vec![b"new"],
            libc::EROFS,
        );
        case(
            "create over",
            Opcode::Create,
            ROOT_ID,
            args(&create),
            vec![b"file"],
            libc::EROFS,
        );
    }
    for mode in [
        libc::S_IFREG | 0o644,
        libc::S_IFIFO | 0o644,
        libc::S_IFSOCK | 0o644,
    ] {
        let mknod = MknodIn {
            mode,
            ..MknodIn::default()
        };
        case(
            "mknod",
            Opcode::Mknod,
            ROOT_ID,
            args(&mknod),
            vec![b"node"],
            libc::EROFS,
        );
    }
    let mkdir = MkdirIn {
        mode: 0o755,
        umask: 0,
    };
    case(
        "mkdir",
        Opcode::Mkdir,
        ROOT_ID,
        args(&mkdir),
        vec![b"dir"],
        libc::EROFS,
    );
    case(
        "symlink",
        Opcode::Symlink,
        ROOT_ID,
        &[],
        vec![b"sl", b"file"],
        libc::EROFS,
    );
    let link = LinkIn { oldnodeid: file };
    case(
        "link",
        Opcode::Link,
        ROOT_ID,
        args(&link),
        vec![b"hard"],
        libc::EROFS,
    );
    case(
        "link",
        Opcode::Link,
        sub,
        args(&link),
        vec![b"hard"],
        libc::EROFS,
    );
    case(
        "unlink",
        Opcode::Unlink,
        ROOT_ID,
        &[],
        vec![b"file"],
        libc::EROFS,
    );
    case(
        "unlink link",
        Opcode::Unlink,
        ROOT_ID,
        &[],
        vec![b"link-out"],
        libc::EROFS,
    );
    case(
        "rmdir",
        Opcode::Rmdir,
        ROOT_ID,
        &[],
        vec![b"empty"],
        libc::EROFS,
    );
    let rename = RenameIn { newdir: sub };
    case(
        "rename",
        Opcode::Rename,
        ROOT_ID,
        args(&rename),
        vec![b"file", b"moved"],
        libc::EROFS,
    );
    for flags in [
        0,
        libc::RENAME_NOREPLACE,
        libc::RENAME_EXCHANGE,
        libc::RENAME_WHITEOUT,
    ] {
        let rename2 = Rename2In {
            newdir: ROOT_ID,
            flags,
            padding: 0,
        };
        let names: Vec<&[u8]> = vec![b"file", b"sub"];
        case(
            "rename2",
            Opcode::Rename2,
            ROOT_ID,
            args(&rename2),
            names,
            libc::EROFS,
        );
    }
    let setxattr = SetxattrIn { size: 4, flags: 0 };
    let mut value = args(&setxattr).to_vec();
    value.extend(b"user.new\0evil");
    case(
        "setxattr",
        Opcode::Setxattr,
        file,
        &value,
        vec![],
        libc::EROFS,
    );
    let mut replace = args(&setxattr).to_vec();
    replace.extend(b"user.keep\0evil");
    case(
        "setxattr replace",
        Opcode::Setxattr,
        file,
        &replace,
        vec![],
        libc::EROFS,
    );
    case(
        "removexattr",
        Opcode::Removexattr,
        file,
        &[],
        vec![b"user.keep"],
        libc::EROFS,
    );
    let write = WriteIn {
        fh,
        size: 8,
        ..WriteIn::default()
    };
    let mut data = args(&write).to_vec();
    data.extend(b"evil!!!!");
    case("write", Opcode::Write, file, &data, vec![], libc::EROFS);
    for mode in [0, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE] {
        let fallocate = FallocateIn {
            fh,
            offset: 0,
            length: 1 << 20,
            mode: mode as u32,
            padding: 0,
        };
        case(
            "fallocate",
            Opcode::Fallocate,
            file,
            args(&fallocate),
            vec![],
            libc::EROFS,
        );
    }
    let copy = CopyFileRangeIn {
        fh_in: fh,
        offset_in: 0,
        nodeid_out: file,
        fh_out: fh,
        offset_out: 4096,
        len: 4096,
        flags: 0,
    };
    case(
        "copy_file_range",
        Opcode::CopyFileRange,
        file,
        args(&copy),
        vec![],
        0,
    );
    let mapping = SetupmappingIn {
        fh,
        foffset: 0,
        len: 4096,
        flags: 0x3,
        moffset: 0,
    };
    case(
        "setupmapping",
        Opcode::SetupMapping,
        file,
        args(&mapping),
        vec![],
        0,
    );
    let access = AccessIn {
        mask: libc::W_OK as u32,
        padding: 0,
    };
    case(
        "access W_OK",
        Opcode::Access,
        file,
        args(&access),
        vec![],
        libc::EROFS,
    );
    case("ioctl", Opcode::Ioctl, file, &[0u8; 32], vec![], 0);

    for (what, opcode, node, args, names, wanted) in &cases {
        let what = format!("{what} (opcode {opcode}, node {node})");
        let out = raw_call(&mut client, *opcode, *node, args, names)
            .unwrap_or_else(|| panic!("{what}: no reply"));
        if *wanted == 0 {
            assert_ne!(out.error, 0, "{what} succeeded");
        } else {
            assert_eq!(errno(&out), *wanted, "{what}");
        }
        share.check(&what, &mut client);
    }
    for opcode in NEWER_OPCODES {
        let out = raw_call(&mut client, opcode, ROOT_ID, &[0u8; 64], &[b"tmp"]);
        assert!(out.is_some_and(|o| o.error != 0), "opcode {opcode}");
        share.check(&format!("opcode {opcode}"), &mut client);
    }
    // Looking stays possible.
    assert!(client.getattr(empty).is_ok());
    client.release(file, fh).unwrap();
    drop(client);
    share.check_anew("the end");
}
