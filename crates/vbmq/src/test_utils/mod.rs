//! Test support (feature `test-utils`): a driver's side of a split virtqueue, for the worker
//! tests, the criterion benchmark, the fuzz targets and the hostile frontend; and the fuzz
//! targets' bodies with their oracles, which `cargo test` also runs (tests/fuzz_replay.rs).

#[cfg(feature = "test-utils")]
pub mod fuzz;
mod split_ring;

pub use split_ring::{Buffer, SplitRing, blk_header};
