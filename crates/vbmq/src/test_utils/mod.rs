//! Test support (feature `test-utils`): a driver's side of a split virtqueue (vbmq-driver's,
//! which the worker tests use directly), for the criterion benchmark, the fuzz targets and the
//! hostile frontend; and the fuzz targets' bodies with their oracles, which `cargo test` also
//! runs (tests/fuzz_replay.rs).

#[cfg(feature = "test-utils")]
pub mod fuzz;
pub use vbmq_driver::{Buffer, SplitRing, blk_header};
