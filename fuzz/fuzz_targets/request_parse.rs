//! The request parser with an oracle: any chain a guest can build (raw flags and links, indirect
//! tables, headers, ranges, addresses near and past the ends of guest memory) goes through
//! `vbmq::virtio_blk::parse`, and whatever it accepts must be safe to execute:
//! data inside the disk and inside guest memory, in the right direction, within the limits, and a
//! status byte only in a device-writable descriptor. A crash here is a validation bug.
//!
//! The body and its oracle live in `vbmq::test_utils::fuzz`, so that `cargo test` replays them.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vbmq::test_utils::fuzz::request_parse(data));
