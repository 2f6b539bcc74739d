//! A guest's requests, as a queue worker sees them: descriptor tables, indirect tables, headers
//! and avail entries written into two guest memory regions, then served by the real worker over
//! a memory disk. Structure-aware: most chains are well formed, some are broken on purpose.
//! Whatever the input, the worker must not panic, must not hang, and must return only heads
//! that exist.
//!
//! The body and its oracle live in `vbmq::test_utils::fuzz`, so that `cargo test` replays them.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vbmq::test_utils::fuzz::queue_requests(data));
