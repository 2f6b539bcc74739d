//! The command line: `--disk` specifications and the values inside them.

mod blk_program_args;
mod cpu_list;
mod disk_keys;
mod disk_spec;
mod fs_spec;
mod layer_spec;
mod limit_keys;
mod on_off;
mod size;
mod sockets;
mod spec_error;
mod stack_spec;
mod virtiofsd_args;

pub use blk_program_args::{
    BLK_PROGRAM_CAPABILITIES, BLK_PROGRAM_HELP, BlkProgramArgs, BlkProgramCommand,
    parse_blk_program_args,
};
pub use cpu_list::parse_cpu_list;
pub use disk_keys::{DISK_KEYS, DiskKey, disk_key, disk_keys_help};
pub use disk_spec::{DiskSpec, Storage};
pub use fs_spec::{FS_KEYS, FsSpec, FsSpecError};
pub use layer_spec::LayerSpec;
pub use limit_keys::{LIMIT_KEYS, parse_limits};
pub use size::parse_size;
pub use sockets::{check_disks, check_sockets};
pub use spec_error::SpecError;
pub use stack_spec::{BaseSpec, NeededFile, StackSpec, StorageSpec};
pub use virtiofsd_args::{
    VIRTIOFSD_CAPABILITIES, VIRTIOFSD_HELP, VirtiofsdArgs, VirtiofsdCommand, parse_virtiofsd_args,
};
