//! What a share offers the guest besides its files: the caching it allows, xattrs, POSIX ACLs,
//! submounts, `O_DIRECT`, and whether it may be changed at all.

use std::time::Duration;

use fuse_backend_rs::passthrough::xattrmap::XattrMap;

use super::IdMap;
use fuse_backend_rs::passthrough::{CachePolicy, Config};

/// How much the guest may cache, as virtiofsd's `--cache`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FsCache {
    /// No data, metadata or names cached: every access asks the host.
    Never,
    /// Names and attributes cached (a day); file data never.
    Metadata,
    /// Data cached until the file is opened again (close-to-open), attributes for seconds.
    #[default]
    Auto,
    /// Everything cached (a day): only when no one else changes the directory.
    Always,
}

impl FsCache {
    /// The policy named `text` (`never`, `none`, `metadata`, `auto`, `always`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "never" | "none" => Some(FsCache::Never),
            "metadata" => Some(FsCache::Metadata),
            "auto" => Some(FsCache::Auto),
            "always" => Some(FsCache::Always),
            _ => None,
        }
    }
}

/// A share's options beyond its directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareFeatures {
    /// Refuse every change with `EROFS`.
    pub readonly: bool,
    /// Serve extended attributes (off: the xattr requests answer `ENOSYS`, which the guest
    /// kernel remembers as "not supported").
    pub xattr: bool,
    /// Let the guest kernel enforce POSIX ACLs (needs `xattr`).
    pub posix_acl: bool,
    /// Tell the guest which directories are host mount points.
    pub announce_submounts: bool,
    /// Honour `O_DIRECT` in the guest's opens (off: the flag is dropped).
    pub allow_direct_io: bool,
    /// The cache policy.
    pub cache: FsCache,
    /// virtiofsd's `--xattrmap` rules (implies `xattr`), checked by [`check_xattrmap`].
    pub xattrmap: Option<String>,
    /// User IDs translated between guest and host.
    pub uids: IdMap,
    /// Group IDs translated between guest and host.
    pub gids: IdMap,
    /// Offer the frontend the configuration space (the tag) through vhost-user's CONFIG, as
    /// virtiofsd does when given `--tag` (QEMU keeps its own and does not ask).
    pub offer_config: bool,
}

/// Whether `rules` are an xattr map fuse-backend-rs (virtiofsd's syntax) takes; the error
/// names the bad rule.
pub fn check_xattrmap(rules: &str) -> Result<(), String> {
    XattrMap::try_from(rules)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

impl Default for ShareFeatures {
    /// What `--fs` gives unless told: writable, xattrs, `O_DIRECT`, `cache=auto`.
    fn default() -> Self {
        ShareFeatures {
            readonly: false,
            xattr: true,
            posix_acl: false,
            announce_submounts: false,
            allow_direct_io: true,
            cache: FsCache::Auto,
            xattrmap: None,
            uids: IdMap::default(),
            gids: IdMap::default(),
            offer_config: false,
        }
    }
}

impl ShareFeatures {
    /// Sets these features in the passthrough's `config`: the cache policy with virtiofsd's
    /// timeouts (none for `never`, a day for `metadata` and `always`; `auto` keeps the
    /// passthrough's five seconds).
    pub(super) fn apply(&self, config: &mut Config) -> Result<(), String> {
        let day = Duration::from_secs(86_400);
        let (policy, timeout) = match self.cache {
            FsCache::Never => (CachePolicy::Never, Some(Duration::ZERO)),
            FsCache::Metadata => (CachePolicy::Metadata, Some(day)),
            FsCache::Auto => (CachePolicy::Auto, None),
            FsCache::Always => (CachePolicy::Always, Some(day)),
        };
        config.cache_policy = policy;
        if let Some(timeout) = timeout {
            config.entry_timeout = timeout;
            config.attr_timeout = timeout;
        }
        config.xattr = self.xattr || self.posix_acl || self.xattrmap.is_some();
        config.posix_acl = self.posix_acl;
        config.announce_submounts = self.announce_submounts;
        config.allow_direct_io = self.allow_direct_io;
        config.xattrmap = match &self.xattrmap {
            Some(rules) => Some(XattrMap::try_from(rules.as_str()).map_err(|e| e.to_string())?),
            None => None,
        };
        Ok(())
    }
}
