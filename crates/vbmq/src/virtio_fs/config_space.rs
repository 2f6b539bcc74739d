//! The virtio-fs configuration space (virtio 1.2, 5.11.4): the tag the guest mounts by and the
//! number of request queues.

/// Bytes of the tag field; a shorter tag is padded with zeros, a tag of exactly this length
/// has no terminating zero.
pub const TAG_LEN: usize = 36;

/// `struct virtio_fs_config { u8 tag[36]; le32 num_request_queues; }`
pub fn config_space(tag: &str, request_queues: u32) -> [u8; TAG_LEN + 4] {
    let mut config = [0u8; TAG_LEN + 4];
    let tag = tag.as_bytes();
    let n = tag.len().min(TAG_LEN);
    config[..n].copy_from_slice(&tag[..n]);
    config[TAG_LEN..].copy_from_slice(&request_queues.to_le_bytes());
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_then_little_endian_queue_count() {
        let config = config_space("share", 2);
        assert_eq!(&config[..5], b"share");
        assert!(config[5..TAG_LEN].iter().all(|&b| b == 0));
        assert_eq!(config[TAG_LEN..], [2, 0, 0, 0]);
    }
}
