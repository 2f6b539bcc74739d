//! `--fs`: a host directory shared with guests over vhost-user-fs. Its keys follow `--disk`
//! where they mean the same.

use std::path::PathBuf;

use super::DiskSpec;
use super::disk_spec::{
    check_cpus, cpus, on_off, poll_us, queue_size, queues, socket_group, socket_mode, wait_mode,
};
use super::spec_error::{SpecError, bad};
use crate::virtio_fs::{FsCache, OnError, TAG_LEN};
use crate::worker::WaitMode;

/// The keys `FsSpec::parse` accepts, with their meaning (for `--help`).
pub const FS_KEYS: &[(&str, &str)] = &[
    ("socket=PATH", "the vhost-user-fs socket (required)"),
    ("dir=DIR", "the host directory to share (required)"),
    (
        "tag=NAME",
        "the name the guest mounts (required, at most 36 bytes)",
    ),
    (
        "queues=N",
        "request queues, each with its own thread (default 1)",
    ),
    (
        "queue-size=N",
        "largest queue size the frontend may set (default 1024)",
    ),
    (
        "mode=event|poll|adaptive",
        "how the queue threads wait (default adaptive)",
    ),
    (
        "poll-us=N",
        "adaptive: how long to poll after the last request (default 64)",
    ),
    (
        "cpus=LIST",
        "pin queue N's thread (the high-priority queue's too) to the Nth CPU",
    ),
    (
        "readonly=on|off",
        "refuse every change to the share with EROFS (default off)",
    ),
    (
        "socket-mode=OCTAL",
        "the socket's permission bits (default 0600)",
    ),
    ("socket-group=NAME|GID", "the socket's group"),
    (
        "cache=never|metadata|auto|always",
        "what the guest may cache, as virtiofsd's --cache (default auto)",
    ),
    ("xattr=on|off", "serve extended attributes (default on)"),
    (
        "posix-acl=on|off",
        "let the guest enforce POSIX ACLs; implies xattr=on (default off)",
    ),
    (
        "announce-submounts=on|off",
        "tell the guest which directories are host mount points (default off)",
    ),
    (
        "direct-io=on|off",
        "honour O_DIRECT in the guest's opens (default on)",
    ),
    (
        "migration-on-error=abort|guest-error",
        "a migration's destination, for a file the guest held that it cannot open: fail the \
         migration, or let the guest get errors on that file (default abort)",
    ),
];

/// A parsed `--fs` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsSpec {
    /// The vhost-user socket.
    pub socket: PathBuf,
    /// The shared directory.
    pub dir: PathBuf,
    /// The tag the guest mounts by.
    pub tag: String,
    /// Request queues (the high-priority queue comes on top).
    pub queues: usize,
    /// Largest queue size the frontend may set.
    pub queue_size: u16,
    /// How the queue threads wait.
    pub mode: WaitMode,
    /// Adaptive mode: microseconds of polling after the last request.
    pub poll_us: u64,
    /// CPUs to pin request queue threads to, in order; the high-priority queue (event-driven)
    /// shares the first.
    pub cpus: Vec<usize>,
    /// Refuse changes with `EROFS`.
    pub readonly: bool,
    /// Socket permission bits.
    pub socket_mode: u32,
    /// Socket group.
    pub socket_group: Option<u32>,
    /// What the guest may cache.
    pub cache: FsCache,
    /// Serve extended attributes.
    pub xattr: bool,
    /// Let the guest kernel enforce POSIX ACLs.
    pub posix_acl: bool,
    /// Tell the guest which directories are host mount points.
    pub announce_submounts: bool,
    /// Honour `O_DIRECT`.
    pub direct_io: bool,
    /// A listening socket inherited from the process that started vbmq (virtiofsd's `--fd`),
    /// served in place of binding `socket` (which then only names it in the log).
    pub listen_fd: Option<i32>,
    /// virtiofsd's `--xattrmap` rules (`vbmq virtiofsd` only: its rules may hold commas).
    pub xattrmap: Option<String>,
    /// User IDs translated between guest and host (`vbmq virtiofsd`'s `--translate-uid`,
    /// `--uid-map`).
    pub uid_map: Vec<crate::virtio_fs::IdRule>,
    /// Group IDs translated between guest and host.
    pub gid_map: Vec<crate::virtio_fs::IdRule>,
    /// Offer the tag through vhost-user's CONFIG (`vbmq virtiofsd --tag`).
    pub offer_config: bool,
    /// A migration's destination: what to do with a held file it cannot open again.
    pub migration_on_error: OnError,
}

impl FsSpec {
    /// The share's features, as [`crate::virtio_fs::FsDevice::open_with`] takes them.
    pub fn features(&self) -> crate::virtio_fs::ShareFeatures {
        crate::virtio_fs::ShareFeatures {
            readonly: self.readonly,
            xattr: self.xattr,
            posix_acl: self.posix_acl,
            announce_submounts: self.announce_submounts,
            allow_direct_io: self.direct_io,
            cache: self.cache,
            xattrmap: self.xattrmap.clone(),
            uids: crate::virtio_fs::IdMap(self.uid_map.clone()),
            gids: crate::virtio_fs::IdMap(self.gid_map.clone()),
            offer_config: self.offer_config,
        }
    }

    /// A share of `dir` on `socket`, tagged `tag`, with every other key at its default.
    pub fn new(socket: PathBuf, dir: PathBuf, tag: String) -> Self {
        FsSpec {
            socket,
            dir,
            tag,
            queues: 1,
            queue_size: 1024,
            mode: WaitMode::Adaptive,
            poll_us: 64,
            cpus: Vec::new(),
            readonly: false,
            socket_mode: 0o600,
            socket_group: None,
            cache: FsCache::Auto,
            xattr: true,
            posix_acl: false,
            announce_submounts: false,
            direct_io: true,
            listen_fd: None,
            xattrmap: None,
            uid_map: Vec::new(),
            gid_map: Vec::new(),
            offer_config: false,
            migration_on_error: OnError::Abort,
        }
    }
}

/// An `--fs` argument that cannot be served; the message names the key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("--fs {}: {}", .0.key, .0.reason)]
pub struct FsSpecError(pub SpecError);

impl From<SpecError> for FsSpecError {
    fn from(e: SpecError) -> Self {
        FsSpecError(e)
    }
}

impl FsSpec {
    /// Parses one `--fs` value. `online_cpus` are the CPUs this process may run on.
    ///
    /// ```
    /// let spec = vbmq::config::FsSpec::parse("socket=/run/fs.sock,dir=/srv/vm1,tag=share,queues=2", &[0])?;
    /// assert_eq!((spec.tag.as_str(), spec.queues), ("share", 2));
    /// let err = vbmq::config::FsSpec::parse("socket=/s,dir=/d", &[0]).unwrap_err();
    /// assert_eq!(err.to_string(), "--fs tag: required");
    /// # Ok::<(), vbmq::config::FsSpecError>(())
    /// ```
    pub fn parse(text: &str, online_cpus: &[usize]) -> Result<Self, FsSpecError> {
        let (mut socket, mut dir, mut tag) = (None, None, None);
        let mut spec = FsSpec::new(PathBuf::new(), PathBuf::new(), String::new());
        for (key, value) in DiskSpec::pairs(text)? {
            let value = value.as_str();
            match key {
                "socket" => socket = Some(PathBuf::from(value)),
                "dir" => dir = Some(PathBuf::from(value)),
                "tag" => {
                    if value.is_empty() || value.len() > TAG_LEN || value.contains('\0') {
                        return Err(bad(key, format!("1 to {TAG_LEN} bytes, no NUL")).into());
                    }
                    tag = Some(value.to_string());
                }
                "queues" => spec.queues = queues(key, value)?,
                "queue-size" => spec.queue_size = queue_size(key, value)?,
                "mode" => spec.mode = wait_mode(key, value)?,
                "poll-us" => spec.poll_us = poll_us(key, value)?,
                "cpus" => spec.cpus = cpus(key, value, online_cpus)?,
                "readonly" => spec.readonly = on_off(key, value)?,
                "socket-mode" => spec.socket_mode = socket_mode(key, value)?,
                "socket-group" => spec.socket_group = Some(socket_group(key, value)?),
                "cache" => {
                    spec.cache = FsCache::parse(value)
                        .ok_or_else(|| bad(key, "never, metadata, auto or always"))?;
                }
                "xattr" => spec.xattr = on_off(key, value)?,
                "posix-acl" => spec.posix_acl = on_off(key, value)?,
                "announce-submounts" => spec.announce_submounts = on_off(key, value)?,
                "direct-io" => spec.direct_io = on_off(key, value)?,
                "migration-on-error" => {
                    spec.migration_on_error =
                        OnError::parse(value).ok_or_else(|| bad(key, "abort or guest-error"))?;
                }
                _ => return Err(bad(key, "unknown key (vbmq serve --help lists them)").into()),
            }
        }
        spec.socket = socket.ok_or_else(|| bad("socket", "required"))?;
        spec.dir = dir.ok_or_else(|| bad("dir", "required"))?;
        spec.tag = tag.ok_or_else(|| bad("tag", "required"))?;
        check_cpus(&spec.cpus, spec.queues, spec.mode)?;
        if spec.posix_acl && !spec.xattr {
            return Err(bad("posix-acl", "needs xattr=on").into());
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_disk_keys() {
        let spec = FsSpec::parse(
            "socket=/s,dir=/d,tag=t,queues=2,mode=poll,cpus=0,1,readonly=on,socket-mode=0660",
            &[0, 1],
        )
        .unwrap();
        assert_eq!(spec.queues, 2);
        assert_eq!(spec.mode, WaitMode::Poll);
        assert_eq!(spec.cpus, vec![0, 1]);
        assert!(spec.readonly);
        assert_eq!(spec.socket_mode, 0o660);
        assert_eq!(spec.cache, FsCache::Auto);
        let spec = FsSpec::parse(
            "socket=/s,dir=/d,tag=t,cache=never,xattr=off,announce-submounts=on,direct-io=off",
            &[0],
        )
        .unwrap();
        assert_eq!(spec.cache, FsCache::Never);
        assert!(!spec.xattr && spec.announce_submounts && !spec.direct_io);
        assert_eq!(spec.migration_on_error, OnError::Abort);
        let spec = FsSpec::parse(
            "socket=/s,dir=/d,tag=t,migration-on-error=guest-error",
            &[0],
        );
        assert_eq!(spec.unwrap().migration_on_error, OnError::GuestError);
    }

    #[test]
    fn errors_name_the_key() {
        let key = |text: &str| FsSpec::parse(text, &[0]).unwrap_err().0.key;
        assert_eq!(key("dir=/d,tag=t"), "socket");
        assert_eq!(key("socket=/s,tag=t"), "dir");
        assert_eq!(key("socket=/s,dir=/d,tag="), "tag");
        assert_eq!(
            key(&format!("socket=/s,dir=/d,tag={}", "x".repeat(37))),
            "tag"
        );
        assert_eq!(key("socket=/s,dir=/d,tag=t,cpus=7"), "cpus");
        assert_eq!(key("socket=/s,dir=/d,tag=t,path=/x"), "path");
        assert_eq!(key("socket=/s,dir=/d,tag=t,mode=poll"), "cpus");
        assert_eq!(key("socket=/s,dir=/d,tag=t,queues=2,cpus=0"), "cpus");
        assert_eq!(key("socket=/s,dir=/d,tag=t,cache=sometimes"), "cache");
        assert_eq!(
            key("socket=/s,dir=/d,tag=t,xattr=off,posix-acl=on"),
            "posix-acl"
        );
        assert_eq!(
            key("socket=/s,dir=/d,tag=t,migration-on-error=ignore"),
            "migration-on-error"
        );
    }
}
