//! One shared directory: its FUSE server, and the answer to each request.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fuse_backend_rs::abi::fuse_abi::{InHeader, OutHeader};
use fuse_backend_rs::api::filesystem::FileSystem;
use fuse_backend_rs::api::server::Server;
use fuse_backend_rs::passthrough::{CachePolicy, Config, PassthroughFs};
use fuse_backend_rs::transport::{Reader, VirtioFsWriter};
use virtio_queue::DescriptorChain;
use vm_memory::ByteValued;

use crate::vhost_user::GuestMemory;

/// Why a share cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ShareError {
    /// `dir=` is not a directory vbmq can open.
    #[error("{0}: {1}")]
    Dir(PathBuf, std::io::Error),
}

/// A directory shared with guests, and how.
pub struct FsDevice {
    tag: String,
    request_queues: u32,
    readonly: bool,
    fs: Arc<PassthroughFs>,
    server: Server<Arc<PassthroughFs>>,
}

impl FsDevice {
    /// Opens `dir` for passthrough. Everything the guest names is resolved under it by the
    /// passthrough's own rules: `openat` on the parent's descriptor with `O_NOFOLLOW`, no `/` in
    /// names, and files reopened only when regular or directories.
    pub fn open(
        dir: &Path,
        tag: &str,
        request_queues: u32,
        readonly: bool,
    ) -> Result<Self, ShareError> {
        let error = |e| ShareError::Dir(dir.to_path_buf(), e);
        let root = std::fs::canonicalize(dir).map_err(error)?;
        if !root.is_dir() {
            return Err(error(std::io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        let config = Config {
            root_dir: root.to_string_lossy().into_owned(),
            cache_policy: CachePolicy::Auto,
            xattr: true,
            do_import: true,
            // No request reaches a file outside `dir=`, whatever the host moves (SECURITY.md).
            stay_in_root: true,
            // No device nodes, set-ID bits, file capabilities or trusted xattrs from a guest.
            refuse_privileged: true,
            ..Config::default()
        };
        let fs = Arc::new(PassthroughFs::<()>::new(config).map_err(error)?);
        fs.import().map_err(error)?;
        Ok(FsDevice {
            tag: tag.to_string(),
            request_queues,
            readonly,
            server: Server::new(fs.clone()),
            fs,
        })
    }

    /// The configuration space the guest reads.
    pub fn config(&self) -> [u8; super::TAG_LEN + 4] {
        super::config_space(&self.tag, self.request_queues)
    }

    /// Forgets everything a frontend's guest looked up or opened (its FUSE session ended with
    /// the connection, DESTROY or not): the descriptors are closed, the root stays.
    pub fn end_session(&self) {
        self.fs.destroy();
    }

    /// The number of request queues (besides the high-priority queue).
    pub fn request_queues(&self) -> u32 {
        self.request_queues
    }

    /// Serves one request; returns the bytes written into the chain's writable buffers, for the
    /// used ring. A chain whose buffers lie outside guest memory, or whose request the server
    /// cannot decode, is returned with nothing written (FORGET has no reply either).
    pub fn handle(&self, mem: &GuestMemory, chain: DescriptorChain<&GuestMemory>) -> u32 {
        let Ok((reader, writer)) = Reader::with_writer(mem, chain) else {
            crate::limited!(
                warn,
                "virtio-fs: a request's buffers are not in guest memory"
            );
            return 0;
        };
        if self.readonly
            && let Some(written) = refuse_change(&reader, writer.clone())
        {
            return written;
        }
        match self
            .server
            .handle_message(reader, writer.into(), None, None)
        {
            Ok(written) => u32::try_from(written).unwrap_or(u32::MAX),
            Err(e) => {
                crate::limited!(debug, "virtio-fs: request not served: {e}");
                0
            }
        }
    }
}

/// On a read-only share, answers a request that would change it with `EROFS`; `None` for one
/// that may go on (its reader untouched).
fn refuse_change<S: vm_memory::bitmap::BitmapSlice>(
    reader: &Reader<'_, S>,
    mut writer: VirtioFsWriter<'_, S>,
) -> Option<u32> {
    let mut peek = reader.clone();
    let header: InHeader = peek.read_obj().ok()?;
    if !super::readonly::modifies(&header, &peek) {
        return None;
    }
    #[allow(clippy::cast_possible_truncation)] // 16 bytes.
    const REPLY_LEN: u32 = size_of::<OutHeader>() as u32;
    let reply = OutHeader {
        len: REPLY_LEN,
        error: -libc::EROFS,
        unique: header.unique,
    };
    match writer.write_all(reply.as_slice()) {
        Ok(()) => Some(reply.len),
        Err(_) => Some(0),
    }
}
