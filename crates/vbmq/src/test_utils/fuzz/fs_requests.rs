//! A guest's FUSE requests, as a virtio-fs queue worker sees them: LOOKUP, CREATE, WRITE, READ,
//! RENAME and the rest, with names such as `..`, `/` and raw bytes, node ids returned earlier or
//! made up, buffers split, too short, the wrong way round or outside guest memory; then served by
//! the real worker over a passthrough of a scratch directory. Whatever the input, the worker must
//! not panic or hang, must return only heads that exist with no more bytes than the chain can
//! take, and nothing outside the shared directory may change (nor inside it, when read-only):
//! a canary directory beside the share keeps its contents, modes, owners and times.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arbitrary::{Arbitrary, Unstructured};
use fuse_backend_rs::abi::fuse_abi::{
    CreateIn, EntryOut, ForgetIn, GetattrIn, InHeader, InitIn, KERNEL_MINOR_VERSION,
    KERNEL_VERSION, LinkIn, MkdirIn, Opcode, OpenIn, OutHeader, ReadIn, ReleaseIn, RenameIn,
    SetattrIn, WriteIn,
};
use vhost_user_backend::VringT;
use vm_memory::{ByteValued, Bytes, GuestAddress, GuestAddressSpace, GuestMemoryAtomic};

use crate::guest::{GuestMemory, Vring};
use crate::test_utils::{Buffer, SplitRing};
use crate::virtio_fs::FsDevice;
use crate::virtio_fs::queue::FsQueue;
use crate::worker::{QueueSettings, WaitMode};

const QUEUE_SIZE: u16 = 16;
const RING: u64 = 0x1000;
const REQUEST: u64 = 0x1_0000;
const REPLY: u64 = 0x3_0000;
const MEMORY_END: u64 = 1 << 20;

#[derive(Arbitrary, Debug)]
enum Name {
    Plain(u8),
    Parent,
    Current,
    WithSlash,
    Raw(Vec<u8>),
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Plain(n) => format!("n{}", n % 8).into_bytes(),
            Name::Parent => b"..".to_vec(),
            Name::Current => b".".to_vec(),
            Name::WithSlash => b"../outside".to_vec(),
            Name::Raw(bytes) => bytes.iter().copied().take(300).collect(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Node {
    Root,
    Seen(u8),
    Any(u64),
}

#[derive(Arbitrary, Debug)]
enum Op {
    Lookup(Node, Name),
    Forget(Node, u64),
    Getattr(Node),
    Setattr(Node, u32, u64, u32),
    Open(Node, u32),
    Create(Node, Name, u32, u32),
    Mkdir(Node, Name),
    Symlink(Node, Name, Name),
    Link(Node, Node, Name),
    Unlink(Node, Name),
    Rmdir(Node, Name),
    Rename(Node, Name, Node, Name),
    Read(Node, u64, u64, u32),
    Write(Node, u64, u64, u16),
    Readdir(Node, u64, u32, bool),
    Release(Node, u64),
    Statfs(Node),
    Raw(u32, Node, Vec<u8>),
}

#[derive(Arbitrary, Debug, Clone, Copy, Default)]
struct Layout {
    /// Split the request's readable bytes into two descriptors at this point.
    split: Option<u16>,
    /// The reply buffer's length (`None`: room for any reply).
    reply_len: Option<u16>,
    /// The reply buffer is device-readable.
    wrong_way: bool,
    /// The reply buffer lies at an arbitrary address.
    reply_anywhere: Option<u64>,
    /// The header claims this length instead of the real one.
    claimed_len: Option<u32>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    init: bool,
    readonly: bool,
    ops: Vec<(Op, Layout)>,
}

fn with_name(body: &[u8], names: &[&Name]) -> Vec<u8> {
    let mut out = body.to_vec();
    for name in names {
        out.extend(name.bytes());
        out.push(0);
    }
    out
}

/// The opcode and the bytes after the header.
fn encode(op: &Op, node_of: &dyn Fn(Node) -> u64) -> (u32, u64, Vec<u8>) {
    match op {
        Op::Lookup(parent, name) => (
            Opcode::Lookup as u32,
            node_of(*parent),
            with_name(&[], &[name]),
        ),
        Op::Forget(node, n) => {
            let body = ForgetIn { nlookup: *n };
            (
                Opcode::Forget as u32,
                node_of(*node),
                body.as_slice().to_vec(),
            )
        }
        Op::Getattr(node) => (
            Opcode::Getattr as u32,
            node_of(*node),
            GetattrIn::default().as_slice().to_vec(),
        ),
        Op::Setattr(node, valid, size, mode) => {
            let body = SetattrIn {
                valid: *valid,
                size: *size % (1 << 24),
                mode: *mode,
                ..SetattrIn::default()
            };
            (
                Opcode::Setattr as u32,
                node_of(*node),
                body.as_slice().to_vec(),
            )
        }
        Op::Open(node, flags) => {
            let body = OpenIn {
                flags: *flags,
                fuse_flags: 0,
            };
            (
                Opcode::Open as u32,
                node_of(*node),
                body.as_slice().to_vec(),
            )
        }
        Op::Create(parent, name, flags, mode) => {
            let body = CreateIn {
                flags: *flags,
                mode: *mode,
                umask: 0o022,
                fuse_flags: 0,
            };
            let bytes = with_name(body.as_slice(), &[name]);
            (Opcode::Create as u32, node_of(*parent), bytes)
        }
        Op::Mkdir(parent, name) => {
            let body = MkdirIn {
                mode: 0o755,
                umask: 0o022,
            };
            let bytes = with_name(body.as_slice(), &[name]);
            (Opcode::Mkdir as u32, node_of(*parent), bytes)
        }
        Op::Symlink(parent, name, target) => (
            Opcode::Symlink as u32,
            node_of(*parent),
            with_name(&[], &[name, target]),
        ),
        Op::Link(node, parent, name) => {
            let body = LinkIn {
                oldnodeid: node_of(*node),
            };
            let bytes = with_name(body.as_slice(), &[name]);
            (Opcode::Link as u32, node_of(*parent), bytes)
        }
        Op::Unlink(parent, name) => (
            Opcode::Unlink as u32,
            node_of(*parent),
            with_name(&[], &[name]),
        ),
        Op::Rmdir(parent, name) => (
            Opcode::Rmdir as u32,
            node_of(*parent),
            with_name(&[], &[name]),
        ),
        Op::Rename(parent, name, new_parent, new_name) => {
            let body = RenameIn {
                newdir: node_of(*new_parent),
            };
            let bytes = with_name(body.as_slice(), &[name, new_name]);
            (Opcode::Rename as u32, node_of(*parent), bytes)
        }
        Op::Read(node, fh, offset, size) => {
            let body = ReadIn {
                fh: *fh % 8,
                offset: *offset,
                size: *size,
                ..ReadIn::default()
            };
            (
                Opcode::Read as u32,
                node_of(*node),
                body.as_slice().to_vec(),
            )
        }
        Op::Write(node, fh, offset, len) => {
            let len = u32::from(*len % 8192);
            let body = WriteIn {
                fh: *fh % 8,
                offset: *offset % (1 << 24),
                size: len,
                ..WriteIn::default()
            };
            let mut bytes = body.as_slice().to_vec();
            bytes.resize(bytes.len() + len as usize, 0x5a);
            (Opcode::Write as u32, node_of(*node), bytes)
        }
        Op::Readdir(node, fh, size, plus) => {
            let body = ReadIn {
                fh: *fh % 8,
                size: *size % 16384,
                ..ReadIn::default()
            };
            let opcode = if *plus {
                Opcode::Readdirplus
            } else {
                Opcode::Readdir
            };
            (opcode as u32, node_of(*node), body.as_slice().to_vec())
        }
        Op::Release(node, fh) => {
            let body = ReleaseIn {
                fh: *fh % 8,
                ..ReleaseIn::default()
            };
            (
                Opcode::Release as u32,
                node_of(*node),
                body.as_slice().to_vec(),
            )
        }
        Op::Statfs(node) => (Opcode::Statfs as u32, node_of(*node), Vec::new()),
        Op::Raw(opcode, node, body) => (
            *opcode,
            node_of(*node),
            body.iter().copied().take(4096).collect(),
        ),
    }
}

/// One path as a guest could change it: kind and mode, owner, times (not the access time),
/// and contents or link target.
type Seen = (PathBuf, u32, (u32, u32), (i64, i64), (i64, i64), Vec<u8>);

/// Every path under `dir`, `dir` itself included, sorted.
fn snapshot(dir: &Path) -> Vec<Seen> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let contents = if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|entry| entry.path()));
            }
            b"<dir>".to_vec()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path).map_or_else(
                |_| b"<link>".to_vec(),
                |t| t.as_os_str().as_bytes().to_vec(),
            )
        } else {
            std::fs::read(&path).unwrap_or_default()
        };
        out.push((
            path,
            meta.mode(),
            (meta.uid(), meta.gid()),
            (meta.mtime(), meta.mtime_nsec()),
            (meta.ctime(), meta.ctime_nsec()),
            contents,
        ));
    }
    out.sort();
    out
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch() -> Scratch {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vbmq-fuzz-fs-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("share/d")).expect("scratch share");
    std::fs::create_dir_all(dir.join("outside")).expect("scratch outside");
    std::fs::write(dir.join("share/n1"), b"inside").expect("scratch file");
    std::fs::write(dir.join("outside/secret"), b"outside").expect("scratch secret");
    std::os::unix::fs::symlink("../outside/secret", dir.join("share/n2")).expect("symlink");
    Scratch(dir)
}

fn run(input: &Input) {
    let scratch = scratch();
    let share = scratch.0.join("share");
    let outside_before = snapshot(&scratch.0.join("outside"));
    let share_before = snapshot(&share);
    let device = Arc::new(FsDevice::open(&share, "fuzz", 1, input.readonly).expect("share"));

    let mem = GuestMemory::from_ranges(&[(GuestAddress(0), MEMORY_END as usize)]).expect("memory");
    let atomic = GuestMemoryAtomic::new(mem);
    let vring = Vring::new(atomic.clone(), QUEUE_SIZE).expect("vring");
    let mut ring = SplitRing::at(RING, QUEUE_SIZE);
    vring.set_queue_size(QUEUE_SIZE);
    vring
        .set_queue_info(ring.desc, ring.avail, ring.used)
        .expect("ring inside memory");
    vring.set_queue_event_idx(false);
    vring.set_queue_ready(true);
    vring.set_enabled(true);
    let settings = QueueSettings::unpinned(WaitMode::Event, QUEUE_SIZE);
    let mut worker = FsQueue::worker(0, settings, device, atomic.clone(), Default::default());
    worker.set_up(&vring, true);
    let stop = AtomicBool::new(false);

    let mut seen: Vec<u64> = Vec::new();
    let mut requests: Vec<(u32, Vec<u8>, Option<Layout>)> = Vec::new();
    if input.init {
        let body = InitIn {
            major: KERNEL_VERSION,
            minor: KERNEL_MINOR_VERSION,
            max_readahead: 1 << 20,
            flags: 0,
        };
        requests.push((Opcode::Init as u32, body.as_slice().to_vec(), None));
    }
    let mut ops = input.ops.iter().take(64);
    let mut unique = 1u64;
    loop {
        let (opcode, node, body, layout) = if let Some((opcode, body, layout)) = requests.pop() {
            (opcode, 1, body, layout)
        } else if let Some((op, layout)) = ops.next() {
            let node_of = |node: Node| match node {
                Node::Root => 1,
                Node::Seen(i) if !seen.is_empty() => seen[usize::from(i) % seen.len()],
                Node::Seen(_) => 1,
                Node::Any(id) => id,
            };
            let (opcode, node, body) = encode(op, &node_of);
            (opcode, node, body, Some(*layout))
        } else {
            break;
        };
        let layout = layout.unwrap_or_default();
        let len = u32::try_from(size_of::<InHeader>() + body.len()).unwrap_or(u32::MAX);
        let header = InHeader {
            len: layout.claimed_len.unwrap_or(len),
            opcode,
            unique,
            nodeid: node,
            ..InHeader::default()
        };
        unique += 1;
        let mut request = header.as_slice().to_vec();
        request.extend(&body);
        let mem = atomic.memory();
        mem.write_slice(&request, GuestAddress(REQUEST))
            .expect("request fits");
        let request_len = u32::try_from(request.len()).unwrap_or(u32::MAX);
        let mut buffers = match layout.split.map(|at| u32::from(at) % (request_len + 1)) {
            Some(at) if at > 0 && at < request_len => vec![
                Buffer::readable(REQUEST, at),
                Buffer::readable(REQUEST + u64::from(at), request_len - at),
            ],
            _ => vec![Buffer::readable(REQUEST, request_len)],
        };
        let reply_len = layout.reply_len.map_or(0x2_0000, u32::from);
        let reply_at = layout.reply_anywhere.unwrap_or(REPLY);
        let reply = if layout.wrong_way {
            Buffer::readable(reply_at, reply_len)
        } else {
            Buffer::writable(reply_at, reply_len)
        };
        buffers.push(reply);
        ring.write_chain(&*mem, 0, &buffers);
        ring.publish(&*mem, &[0]);
        drop(mem);
        worker.run(&vring, &stop);

        // The oracle on the used ring: the one head offered, no more bytes than it can take.
        let mem = atomic.memory();
        let used = ring.take_used(&*mem);
        assert_eq!(used.len(), 1, "one request, one used entry: {used:?}");
        let (id, written) = used[0];
        assert_eq!(id, 0, "returned head {id}");
        let writable = if layout.wrong_way { 0 } else { reply_len };
        assert!(
            written <= writable,
            "{written} bytes written into {writable}"
        );
        // Node ids the share handed out, for later requests to use.
        if written as usize >= size_of::<OutHeader>() + size_of::<EntryOut>() && reply_at == REPLY {
            let out: OutHeader = mem.read_obj(GuestAddress(REPLY)).expect("reply");
            let entry: EntryOut = mem
                .read_obj(GuestAddress(REPLY + size_of::<OutHeader>() as u64))
                .expect("entry");
            if out.error == 0 && entry.nodeid != 0 && seen.len() < 32 {
                seen.push(entry.nodeid);
            }
        }
    }
    drop(worker);
    assert_eq!(
        snapshot(&scratch.0.join("outside")),
        outside_before,
        "a file outside the share changed"
    );
    if input.readonly {
        assert_eq!(snapshot(&share), share_before, "a read-only share changed");
    }
}

/// One input: FUSE requests through a real virtio-fs queue worker over a scratch share.
pub fn fs_requests(data: &[u8]) {
    if let Ok(input) = Input::arbitrary_take_rest(Unstructured::new(data)) {
        if std::env::var_os("VBMQ_FUZZ_DEBUG").is_some() {
            eprintln!("{input:#?}");
        }
        run(&input);
    }
}
