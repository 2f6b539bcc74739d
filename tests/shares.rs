//! `vbmq serve --fs` driven through its real socket by the user-space virtio-fs client: what a
//! client reads and writes, and what a hostile guest cannot reach. One binary, one module a
//! subject (each module says what it tests).

mod common;

mod shares {
    pub mod fs_escape;
    pub mod fs_moving;
    pub mod fs_share;
    pub mod fs_used_ring;
}
