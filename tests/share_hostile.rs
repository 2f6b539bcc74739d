//! A hostile guest against a running `vbmq serve --fs` (HOSTILE-GUEST.md), driven through the
//! real socket by the user-space virtio-fs client: requests rewritten while in flight, every
//! opcode that would change a read-only share, malformed FUSE, requests before INIT, guest
//! memory cut under a request. After every case: vbmq is alive, a known file reads right, and
//! nothing outside the share changed (a canary directory beside it: contents, modes, owners,
//! times, xattrs), nor inside a read-only share.

mod common;
#[path = "common/no_landlock.rs"]
mod no_landlock;

mod share_hostile {
    pub mod malformed;
    pub mod memory;
    pub mod migration;
    pub mod racing;
    pub mod readonly;
    pub mod requests;
    pub mod share;
}
