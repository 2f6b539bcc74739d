//! Requests a backend before this one left in flight: when a ring starts with an in-flight
//! record, they are submitted again, oldest first, before any new request is taken.
//!
//! A write may so run twice; the guest was told neither time, and block devices promise nothing
//! about a write that has not completed, so running it again is what a real disk does on a retry.

use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::GuestAddress;

use super::requests::Ctx;

impl Ctx<'_> {
    /// Reads the in-flight record against the ring, places the ring's next available entry after
    /// everything used or in flight, and submits the in-flight requests again. Returns the
    /// requests started and the used entries added.
    pub fn recover(&mut self, queue: &mut Queue, index: usize) -> (usize, usize) {
        let Some(record) = self.record.as_deref_mut() else {
            return (0, 0);
        };
        let ring_used = match queue.used_idx(self.mem, std::sync::atomic::Ordering::Acquire) {
            Ok(used) => used.0,
            Err(e) => {
                crate::limited!(warn, "queue {index}: cannot read the used index: {e}");
                return (0, 0);
            }
        };
        if queue.size() > record.desc_num() {
            crate::limited!(
                warn,
                "queue {index}: the in-flight record covers {} of {} entries; requests on the \
                 others are not tracked across restarts",
                record.desc_num(),
                queue.size()
            );
        }
        let recovery = record.recover(ring_used);
        queue.set_next_avail(recovery.next_avail);
        if recovery.heads.is_empty() {
            return (0, 0);
        }
        crate::limited!(
            info,
            "queue {index}: resubmitting {} requests left in flight by the previous process",
            recovery.heads.len()
        );
        let desc_table = GuestAddress(queue.desc_table());
        let size = queue.size();
        let mut used = 0;
        for &head in &recovery.heads {
            let chain = DescriptorChain::new(self.mem, desc_table, size, head);
            used += self.start(queue, chain);
        }
        (recovery.heads.len(), used)
    }
}
