//! Disks added at run time (`vbmq ctl add-disk`) to a vbmq confined as by default: file disks
//! with their image and socket passed, `base=` and `encrypt=` disks with their base, map and
//! key, `track-changes=on` disks with their maps, and `--state`, which serves them again after
//! a restart. One binary, one module a kind of disk (each module says what it tests).

mod common;

mod run_time_disks {
    pub mod changed_blocks_passed;
    pub mod passed_cloud_disks;
    pub mod passed_disks;
    pub mod restart_state;
}
