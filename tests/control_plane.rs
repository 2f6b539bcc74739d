//! The control plane of a running `vbmq serve`: `vbmq ctl` and raw control-socket clients add,
//! remove, list and resize disks and shares, and `--config` files are applied on SIGHUP and
//! `reload`. One binary, one module a subject (each module says what it tests).

mod common;

mod control_plane {
    pub mod config_file;
    pub mod control;
    pub mod control_shares;
    pub mod resize;
}
