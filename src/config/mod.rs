//! The command line: `--disk` specifications and the values inside them.

mod cpu_list;
mod disk_spec;
mod size;

pub use cpu_list::parse_cpu_list;
pub use disk_spec::{DiskSpec, SpecError, Storage, WaitMode};
pub use size::parse_size;
