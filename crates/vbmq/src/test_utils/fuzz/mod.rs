//! The fuzz targets' bodies: each takes libFuzzer's raw bytes and panics if an oracle fails.
//! `fuzz/fuzz_targets/` calls them under libFuzzer; tests/fuzz_replay.rs calls them over a
//! fixed-seed input stream and the saved inputs in `fuzz/regressions/`.

mod fs_requests;
mod queue_requests;
mod request_parse;
mod split_layout;
mod vhost_user_messages;

pub use fs_requests::fs_requests;
pub use queue_requests::queue_requests;
pub use request_parse::request_parse;
pub use vhost_user_messages::vhost_user_messages;
