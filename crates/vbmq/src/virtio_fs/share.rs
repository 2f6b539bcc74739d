//! One shared directory: its FUSE server, and the answer to each request.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use fuse_backend_rs::abi::fuse_abi::{FsOptions, InHeader, InitIn, Opcode, OutHeader};
use fuse_backend_rs::api::filesystem::FileSystem;
use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::passthrough::{Config, PassthroughFs};
use fuse_backend_rs::transport::{Reader, VirtioFsWriter};
use virtio_queue::DescriptorChain;
use vm_memory::ByteValued;

use super::ShareFeatures;
use super::fds::fd_path;
use super::id_map_fs::IdMapFs;
use super::on_error::OnError;
use super::readonly::ReadOnlyFs;
use super::request_copy::{NotCopied, RequestCopy, Slice};
use super::session::Session;
use crate::guest::GuestMemory;

/// Why a share cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// `dir=` is not a directory vbmq can open.
    #[error("{0}: {1}")]
    Dir(PathBuf, std::io::Error),
    /// The xattr map does not parse.
    #[error("xattrmap: {0}")]
    XattrMap(String),
}

/// A directory shared with guests, and how.
pub struct FsDevice {
    tag: String,
    /// The configuration space is offered through vhost-user's CONFIG.
    offer_config: bool,
    request_queues: u32,
    /// The shared directory, opened once when the share was added and held for its life: no
    /// INIT, DESTROY, reconnect or migration opens `dir=` again (the path only names the
    /// share in messages).
    pub(super) root: std::fs::File,
    pub(super) fs: Arc<PassthroughFs>,
    server: Served,
    /// The guest's FUSE session began (an INIT succeeded): until then every other request gets
    /// `EIO`, as libfuse answers.
    started: AtomicBool,
    /// What the INIT that began it asked for, for a migration to carry.
    session: Mutex<Option<Session>>,
    /// A migration's destination: what to do with a held file it cannot open again.
    pub(super) migration_on_error: OnError,
}

/// The server over the share: a read-only share's file system refuses every change itself.
/// Both translate IDs as the share says (nothing, unless told).
enum Served {
    Writable(Server<IdMapFs<Arc<PassthroughFs>>>),
    ReadOnly(Server<IdMapFs<ReadOnlyFs<Arc<PassthroughFs>>>>),
}

impl FsDevice {
    /// The shared directory, as it was opened when the share was added.
    pub fn root(&self) -> &std::fs::File {
        &self.root
    }

    /// Opens `dir` for passthrough. Everything the guest names is resolved under it by the
    /// passthrough's own rules: `openat` on the parent's descriptor with `O_NOFOLLOW`, no `/` in
    /// names, and files reopened only when regular or directories.
    pub fn open(
        dir: &Path,
        tag: &str,
        request_queues: u32,
        readonly: bool,
    ) -> Result<Self, ShareError> {
        let features = ShareFeatures {
            readonly,
            ..ShareFeatures::default()
        };
        Self::open_with(dir, tag, request_queues, &features)
    }

    /// As [`Self::open`], with every feature of the share chosen. `dir` is opened here, once
    /// (following links: the operator named it), and served as [`Self::from_descriptor`].
    pub fn open_with(
        dir: &Path,
        tag: &str,
        request_queues: u32,
        features: &ShareFeatures,
    ) -> Result<Self, ShareError> {
        let (root, wall) = super::root_mount::open_share_root(dir)
            .map_err(|e| ShareError::Dir(dir.to_path_buf(), e))?;
        tracing::info!("share {tag}: {}: {}", dir.display(), wall.describe());
        Self::from_descriptor(root, dir, tag, request_queues, features)
    }

    /// As [`Self::open_with`], over `root`, a directory another process opened and passed (a
    /// confined vbmq may not open it); `dir` is the path it was named by, for messages.
    pub fn from_descriptor(
        root: std::fs::File,
        dir: &Path,
        tag: &str,
        request_queues: u32,
        features: &ShareFeatures,
    ) -> Result<Self, ShareError> {
        let error = |e| ShareError::Dir(dir.to_path_buf(), e);
        // Where the directory is now: the containment check's first guess at the root's path.
        let hint = fd_path(&root).unwrap_or_else(|_| dir.to_path_buf());
        let fs = passthrough(&hint, features).map_err(|e| e.at(dir))?;
        let held = root.try_clone().map_err(error)?;
        fs.import_from(root).map_err(error)?;
        Ok(Self::serving(fs, held, tag, request_queues, features))
    }

    fn serving(
        fs: Arc<PassthroughFs>,
        root: std::fs::File,
        tag: &str,
        request_queues: u32,
        features: &ShareFeatures,
    ) -> Self {
        let (uids, gids) = (features.uids.clone(), features.gids.clone());
        let server = if features.readonly {
            let fs = ReadOnlyFs(fs.clone());
            Served::ReadOnly(Server::new(IdMapFs { fs, uids, gids }))
        } else {
            let fs = fs.clone();
            Served::Writable(Server::new(IdMapFs { fs, uids, gids }))
        };
        FsDevice {
            tag: tag.to_string(),
            offer_config: features.offer_config,
            request_queues,
            root,
            fs,
            server,
            started: AtomicBool::new(false),
            session: Mutex::new(None),
            migration_on_error: OnError::default(),
        }
    }

    /// Whether the frontend is offered the configuration space (vhost-user's CONFIG).
    pub fn offers_config(&self) -> bool {
        self.offer_config
    }

    /// The share, answering `on_error` when a migration brings a held file it cannot open.
    #[must_use]
    pub fn with_migration_on_error(mut self, on_error: OnError) -> Self {
        self.migration_on_error = on_error;
        self
    }

    /// The configuration space the guest reads.
    pub fn config(&self) -> [u8; super::TAG_LEN + 4] {
        super::config_space(&self.tag, self.request_queues)
    }

    /// Forgets everything a frontend's guest looked up or opened (its FUSE session ended with
    /// the connection, DESTROY or not): the descriptors are closed, the root stays.
    pub fn end_session(&self) {
        self.started.store(false, Ordering::Release);
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.fs.destroy();
    }

    /// Whether the share is read-only (`readonly=on`).
    pub(super) fn readonly(&self) -> bool {
        matches!(self.server, Served::ReadOnly(_))
    }

    /// The FUSE session, once an INIT began it.
    pub fn session(&self) -> Option<Session> {
        *self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Begins the session `session` describes without an INIT (a migration's destination).
    pub(super) fn resume_session(&self, session: Session) {
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(session);
        self.started.store(true, Ordering::Release);
    }

    /// The number of request queues (besides the high-priority queue).
    pub fn request_queues(&self) -> u32 {
        self.request_queues
    }

    /// Serves one request, read once into `copy` (the queue's); returns the bytes written into
    /// the chain's writable buffers, for the used ring. A chain whose buffers lie outside guest
    /// memory, or whose request the server cannot decode, is returned with nothing written
    /// (FORGET has no reply either).
    pub fn handle(
        &self,
        mem: &GuestMemory,
        chain: DescriptorChain<&GuestMemory>,
        copy: &mut RequestCopy,
    ) -> u32 {
        let Ok((guest, writer)) = Reader::with_writer(mem, chain) else {
            crate::limited!(
                warn,
                "virtio-fs: a request's buffers are not in guest memory"
            );
            return 0;
        };
        let (header, reader) = match copy.take(guest) {
            Ok(copied) => copied,
            Err(NotCopied::Unreadable) => {
                crate::limited!(debug, "virtio-fs: a request shorter than its header");
                return 0;
            }
            Err(NotCopied::TooLarge(header)) => return reply_error(&header, writer, libc::ENOMEM),
        };
        let init = header.opcode == Opcode::Init as u32;
        if !init && !self.started.load(Ordering::Acquire) {
            return match Opcode::from(header.opcode) {
                // No reply expected.
                Opcode::Forget | Opcode::BatchForget | Opcode::Interrupt => 0,
                _ => reply_error(&header, writer, libc::EIO),
            };
        }
        let served = match &self.server {
            Served::Writable(server) => serve(server, reader, writer),
            Served::ReadOnly(server) => serve(server, reader, writer),
        };
        match served {
            Ok(written) => {
                // An INIT answered with its `InitOut`, not with an error alone.
                if init && written > size_of::<OutHeader>() {
                    if let Some(session) = init_session(copy.args()) {
                        self.resume_session(session);
                    }
                    self.started.store(true, Ordering::Release);
                }
                u32::try_from(written).unwrap_or(u32::MAX)
            }
            Err(e) => {
                crate::limited!(debug, "virtio-fs: request not served: {e}");
                0
            }
        }
    }
}

/// The passthrough over the directory at `root` (opened by `import` or `import_from`).
/// Why the passthrough over a share could not be made: its directory or its xattr map.
enum PassthroughError {
    Io(std::io::Error),
    XattrMap(String),
}

impl PassthroughError {
    fn at(self, dir: &Path) -> ShareError {
        match self {
            PassthroughError::Io(e) => ShareError::Dir(dir.to_path_buf(), e),
            PassthroughError::XattrMap(e) => ShareError::XattrMap(e),
        }
    }
}

fn passthrough(
    root: &Path,
    features: &ShareFeatures,
) -> Result<Arc<PassthroughFs>, PassthroughError> {
    let mut config = Config {
        root_dir: root.to_string_lossy().into_owned(),
        do_import: true,
        // No request reaches a file outside `dir=`, whatever the host moves (SECURITY.md).
        stay_in_root: true,
        // No device nodes, set-ID bits, file capabilities or trusted xattrs from a guest.
        refuse_privileged: true,
        ..Config::default()
    };
    features
        .apply(&mut config)
        .map_err(PassthroughError::XattrMap)?;
    PassthroughFs::<()>::new(config)
        .map(Arc::new)
        .map_err(PassthroughError::Io)
}

fn serve<'a, F: FileSystem + Sync>(
    server: &Server<F>,
    reader: Reader<'a, Slice<'a>>,
    writer: VirtioFsWriter<'a, Slice<'a>>,
) -> fuse_backend_rs::Result<usize> {
    server.handle_message(reader, writer.into(), None, None)
}

/// What an INIT's arguments `args` (as the server read them) asked for.
fn init_session(args: &[u8]) -> Option<Session> {
    let init = InitIn::from_slice(args.get(..size_of::<InitIn>())?)?;
    let mut flags = u64::from(init.flags);
    if flags & FsOptions::INIT_EXT.bits() != 0 {
        let flags2 = args.get(size_of::<InitIn>()..size_of::<InitIn>() + 4)?;
        flags |= u64::from(u32::from_le_bytes(flags2.try_into().ok()?)) << 32;
    }
    Some(Session {
        major: init.major,
        minor: init.minor,
        flags,
    })
}

/// Answers the request under `header` with `errno` alone.
fn reply_error(header: &InHeader, mut writer: VirtioFsWriter<'_, Slice<'_>>, errno: i32) -> u32 {
    #[allow(clippy::cast_possible_truncation)] // 16 bytes.
    const REPLY_LEN: u32 = size_of::<OutHeader>() as u32;
    let reply = OutHeader {
        len: REPLY_LEN,
        error: -errno,
        unique: header.unique,
    };
    match writer.write_all(reply.as_slice()) {
        Ok(()) => reply.len,
        Err(_) => 0,
    }
}
