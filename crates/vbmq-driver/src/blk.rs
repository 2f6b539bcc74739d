//! virtio-blk as a guest driver writes it.

/// A virtio-blk request header: type, reserved, sector.
pub fn blk_header(request_type: u32, sector: u64) -> [u8; 16] {
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&request_type.to_le_bytes());
    header[8..16].copy_from_slice(&sector.to_le_bytes());
    header
}
