//! The virtio-blk configuration space (`struct virtio_blk_config`).

use virtio_bindings::virtio_blk::virtio_blk_config;
use vm_memory::ByteValued;

use super::device::{BlkDevice, DISCARD_SECTORS_MAX, DISCARD_SEG_MAX, SEG_MAX};

/// `virtio_blk_config` as bytes.
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
struct ConfigBytes(virtio_blk_config);

// SAFETY: `virtio_blk_config` is a packed C struct of integers: every byte pattern is valid and
// it has no padding.
unsafe impl ByteValued for ConfigBytes {}

/// The config space of `device`, little-endian as virtio 1.0 requires.
pub fn config_space(device: &BlkDevice) -> Vec<u8> {
    let block = device.geometry.block_size;
    let discard_alignment = block / 512;
    let mut config = virtio_blk_config {
        capacity: device.sectors().to_le(),
        seg_max: SEG_MAX.to_le(),
        blk_size: block.to_le(),
        physical_block_exp: device.geometry.physical_block_exp,
        min_io_size: 1u16.to_le(),
        num_queues: device.num_queues.to_le(),
        ..Default::default()
    };
    if device.discard {
        config.max_discard_sectors = DISCARD_SECTORS_MAX.to_le();
        config.max_discard_seg = DISCARD_SEG_MAX.to_le();
        config.discard_sector_alignment = discard_alignment.to_le();
        config.max_write_zeroes_sectors = DISCARD_SECTORS_MAX.to_le();
        config.max_write_zeroes_seg = DISCARD_SEG_MAX.to_le();
        config.write_zeroes_may_unmap = 1;
    }
    ConfigBytes(config).as_slice().to_vec()
}
