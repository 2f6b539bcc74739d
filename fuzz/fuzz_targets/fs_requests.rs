//! A guest's FUSE requests through a real virtio-fs queue worker over a scratch share: no
//! panic, no hang, only existing heads returned with no more bytes than their buffers hold, and
//! nothing outside the share changed (nor inside a read-only one).
//!
//! The body and its oracle live in `vbmq::test_utils::fuzz`, so that `cargo test` replays them.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vbmq::test_utils::fuzz::fs_requests(data));
