//! Test support (feature `test-utils`): a driver's side of a split virtqueue, for the worker
//! tests, the criterion benchmark, the fuzz targets and the hostile frontend; and the fuzz
//! targets' bodies with their oracles, which `cargo test` also runs (tests/fuzz_replay.rs).

#[cfg(feature = "test-utils")]
pub mod fuzz;
pub use vbmq_driver::{Buffer, SplitRing};

/// A virtio-blk request header: type, reserved, sector.
pub fn blk_header(request_type: u32, sector: u64) -> [u8; 16] {
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&request_type.to_le_bytes());
    header[8..16].copy_from_slice(&sector.to_le_bytes());
    header
}
