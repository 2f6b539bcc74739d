//! A frontend's vhost-user messages, as raw bytes on the socket, against the real backend
//! (vbmq's `VhostUserBlk` inside rust-vmm's `VhostUserDaemon`): lying sizes, unknown requests,
//! vring indexes past the queues, config reads at any offset. vbmq must answer or close the
//! connection, never panic, and the next frontend must be served.
//!
//! The body and its oracle live in `vbmq::test_utils::fuzz`, so that `cargo test` replays them.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| vbmq::test_utils::fuzz::vhost_user_messages(data));
