//! A ring as the frontend set it up, checked against guest memory before it is served.

use crate::guest::GuestMemory;
use virtio_queue::QueueT;

/// Marks a ring that does not lie wholly inside guest memory broken, and says so.
pub(super) fn stop_outside_memory(index: usize, broken: &mut Option<RingSetup>, setup: RingSetup) {
    crate::limited!(
        warn,
        "queue {index}: ring not wholly inside guest memory; \
         queue stopped until the frontend sets it up again"
    );
    *broken = Some(setup);
}

/// What the frontend set up for a ring, and the memory map it was seen in: a queue is broken for
/// one set-up only, and a placement found inside one memory map is checked again in the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RingSetup {
    desc_table: u64,
    avail_ring: u64,
    used_ring: u64,
    size: u16,
    next_avail: u16,
    /// The memory map's address, only compared.
    memory: usize,
}

impl RingSetup {
    pub(super) fn of(queue: &virtio_queue::Queue, mem: &GuestMemory) -> Self {
        RingSetup {
            desc_table: queue.desc_table(),
            avail_ring: queue.avail_ring(),
            used_ring: queue.used_ring(),
            size: queue.size(),
            next_avail: queue.next_avail(),
            memory: std::ptr::from_ref(mem) as usize,
        }
    }

    /// Where the ring lies, whatever its position.
    pub(super) fn placement(self) -> Self {
        RingSetup {
            next_avail: 0,
            ..self
        }
    }

    /// Whether the descriptor table and both rings (with their event fields) lie wholly inside
    /// guest memory (virtio 1.x, 2.7).
    pub(super) fn fits(&self, mem: &GuestMemory) -> bool {
        let n = u64::from(self.size);
        [
            (self.desc_table, 16 * n),
            (self.avail_ring, 6 + 2 * n),
            (self.used_ring, 6 + 8 * n),
        ]
        .into_iter()
        .all(|(start, len)| {
            vm_memory::GuestMemoryBackend::check_range(
                mem,
                vm_memory::GuestAddress(start),
                crate::host_size(len),
            )
        })
    }
}
