//! The in-flight table: one slot per descriptor head, each with room for a request's iovecs and
//! ranges, allocated once per queue so the hot path never allocates.

use vm_memory::GuestAddress;

use crate::backend::IovList;
use crate::virtio_blk::{DISCARD_SEG_MAX, Range, SEG_MAX};

/// A request that has been handed to the engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot {
    pub busy: bool,
    /// Engine operations still to complete.
    pub pending: u32,
    /// Result every operation must return (bytes for reads and writes, 0 otherwise).
    pub expect: i32,
    pub failed: bool,
    /// Length reported on the used ring on success.
    pub used_len: u32,
    /// Bytes read or written by the guest on success.
    pub read: u32,
    /// Bytes written by the guest on success.
    pub written: u32,
    pub status: GuestAddress,
}

/// Slots indexed by head index.
pub struct InFlight {
    pub slots: Vec<Slot>,
    iovecs: Vec<libc::iovec>,
    ranges: Vec<Range>,
    /// Busy slots.
    pub count: usize,
}

// SAFETY: the iovecs point into guest memory that the owning worker keeps mapped while they are
// in use; the table moves between threads only with its worker, never shared.
unsafe impl Send for InFlight {}

impl InFlight {
    pub fn new(size: usize) -> Self {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        InFlight {
            slots: vec![Slot::default(); size],
            iovecs: vec![empty; size * SEG_MAX as usize],
            ranges: vec![Range::default(); size * DISCARD_SEG_MAX as usize],
            count: 0,
        }
    }

    /// The iovec and range buffers of slot `head`.
    pub fn buffers(&mut self, head: usize) -> (&mut [libc::iovec], &mut [Range]) {
        let (seg, dseg) = (SEG_MAX as usize, DISCARD_SEG_MAX as usize);
        (
            &mut self.iovecs[head * seg..(head + 1) * seg],
            &mut self.ranges[head * dseg..(head + 1) * dseg],
        )
    }

    /// The first `count` iovecs of slot `head`, as the engine receives them: the one place an
    /// [`IovList`] is made for guest buffers.
    pub fn iovecs(&self, head: usize, count: u32) -> IovList {
        let seg = SEG_MAX as usize;
        let slot = &self.iovecs[head * seg..(head + 1) * seg];
        let count = count.min(SEG_MAX);
        // SAFETY: the parser filled the slot's first `count` iovecs with validated guest buffers,
        // and the worker keeps that memory mapped and the slot untouched until the request's
        // completions are reaped; the slot lives as long as the table.
        unsafe { IovList::new(slot.as_ptr(), count) }
    }

    pub fn range(&self, head: usize, i: usize) -> Range {
        self.ranges[head * DISCARD_SEG_MAX as usize + i]
    }
}
