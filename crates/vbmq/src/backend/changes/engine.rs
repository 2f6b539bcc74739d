//! On each queue's path: what each write, write-zeroes and discard covers is marked in the
//! live maps before the operation can reach the storage, so a map never misses a block that
//! changed (at worst it holds one whose write then failed).

use std::sync::Arc;

use super::map::ChangeMap;
use crate::backend::write_hook::BeforeWrite;

impl BeforeWrite for Arc<ChangeMap> {
    fn before_write(&mut self, offset: u64, len: u64) {
        self.mark(offset, len);
    }
}
