//! `--config FILE`: the daemon's disks and settings in TOML, read at start and again on SIGHUP
//! or `vbmq ctl reload`.
//!
//! ```toml
//! control = "/run/vbmq/ctl.sock"
//! metrics = "127.0.0.1:9850"
//! disk = [
//!     "socket=/run/vbmq/vm1.sock,path=/var/lib/vbmq/vm1.raw,queues=4,cpus=2-5",
//!     "socket=/run/vbmq/vm2.sock,rbd=volumes/vm2,cache=2G",
//! ]
//! fs = ["socket=/run/vbmq/vm1-fs.sock,dir=/srv/vm1,tag=share"]
//! fs-root = ["/srv/shares"]
//! ```
//!
//! Shares (`fs`) are read at start only: a reload changes the disks and leaves the shares.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What the file holds; every key is optional and no other is accepted.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// As `--control`.
    pub control: Option<PathBuf>,
    /// As `--metrics`.
    pub metrics: Option<SocketAddr>,
    /// The disks, each exactly a `--disk` value.
    #[serde(default)]
    pub disk: Vec<String>,
    /// The shares, each exactly an `--fs` value.
    #[serde(default)]
    pub fs: Vec<String>,
    /// As `--fs-root`, each a directory.
    #[serde(default, rename = "fs-root")]
    pub fs_root: Vec<PathBuf>,
}

/// Reads and parses the file; the error is one line naming it.
pub fn read(path: &Path) -> Result<ConfigFile, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let message = e.message().to_string();
        format!("{}: {message}", path.display())
    })
}
