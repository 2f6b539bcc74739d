//! `discard=off`: the disk offers the guest neither discard nor write-zeroes, so no guest
//! request punches a hole in the image (a preallocated image stays allocated, as QEMU's
//! `discard=ignore` keeps it). Every operation goes to the engine below unchanged.

use std::io;

use super::{Disk, Engine, EngineOptions, Layer};

/// The layer that hides the disk below's discard support.
pub struct DiscardOff;

impl Layer for DiscardOff {
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        below.engine(options)
    }

    fn supports_discard(&self, _below: &dyn Disk) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{Layered, MemoryDisk};

    #[test]
    fn hides_discard_and_keeps_the_rest() {
        let below: Arc<dyn Disk> = Arc::new(MemoryDisk::new(1 << 20).unwrap());
        assert!(below.supports_discard());
        let disk = Layered::new(Arc::clone(&below), DiscardOff);
        assert!(!disk.supports_discard());
        assert_eq!(disk.geometry(), below.geometry());
    }
}
