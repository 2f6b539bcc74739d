//! The in-flight table: one slot per descriptor head, each with room for a request's iovecs and
//! ranges, allocated once per queue so the hot path never allocates.

use vm_memory::GuestAddress;

use crate::backend::IovList;
use crate::virtio_blk::{DISCARD_SEG_MAX, Range, SEG_MAX, WriteTicket};
use crate::worker::OpKind;

/// A request that has been handed to the engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot {
    pub busy: bool,
    /// Engine operations still to complete.
    pub pending: u32,
    /// Result every operation must return (bytes for reads and writes, 0 otherwise); a request
    /// may be as long as 4 GiB - 1, more than an `i32` result can say at once.
    pub expect: u32,
    pub failed: bool,
    /// Length reported on the used ring on success.
    pub used_len: u32,
    /// Bytes read or written by the guest on success.
    pub read: u32,
    /// Bytes written by the guest on success.
    pub written: u32,
    pub status: GuestAddress,
    /// A read or write: where it goes on, for the rest after a short transfer.
    pub offset: u64,
    pub is_write: bool,
    /// A write, discard or write-zeroes, counted in the device's writes in flight.
    pub write_ticket: Option<WriteTicket>,
    /// The slot's iovecs not yet transferred: `iov_count` from `iov_start`.
    pub iov_start: u32,
    pub iov_count: u32,
    /// What kind of request, for the counters.
    pub kind: OpKind,
    /// When it was taken off the ring ([`now_ns`](crate::timer::now_ns)).
    pub started_ns: u64,
}

/// Slots indexed by head index.
pub struct InFlight {
    pub slots: Vec<Slot>,
    iovecs: Vec<libc::iovec>,
    ranges: Vec<Range>,
    /// Busy slots.
    pub count: usize,
    /// Heads whose read or write came back short, to be pushed again for the rest.
    pub retries: Vec<u16>,
    /// Finished requests (head, used length) whose used entries are not published yet.
    pub finished: Vec<(u16, u32)>,
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
            retries: Vec::with_capacity(size),
            finished: Vec::with_capacity(size),
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

    /// `count` iovecs of slot `head` from `start`, as the engine receives them: the one place an
    /// [`IovList`] is made for guest buffers.
    pub fn iovecs(&self, head: usize, start: u32, count: u32) -> IovList {
        let seg = SEG_MAX as usize;
        let slot = &self.iovecs[head * seg..(head + 1) * seg];
        let start = start.min(SEG_MAX);
        let count = count.min(SEG_MAX - start);
        // SAFETY: the parser filled the slot's first iovecs with validated guest buffers (and
        // `advance` only shortens them), the worker keeps that memory mapped and the slot
        // untouched until the request's completions are reaped; the slot lives as long as the
        // table.
        unsafe { IovList::new(slot[start as usize..].as_ptr(), count) }
    }

    /// Drops the first `bytes` of slot `head`'s remaining iovecs, after a short transfer.
    pub fn advance(&mut self, head: usize, mut bytes: usize) {
        let seg = SEG_MAX as usize;
        let Some(slot) = self.slots.get_mut(head) else {
            return;
        };
        let iovecs = &mut self.iovecs[head * seg..(head + 1) * seg];
        while bytes > 0 && slot.iov_count > 0 {
            let Some(v) = iovecs.get_mut(slot.iov_start as usize) else {
                return;
            };
            if bytes < v.iov_len {
                // SAFETY: `bytes < iov_len`: the pointer stays inside this iovec's buffer.
                v.iov_base = unsafe { v.iov_base.cast::<u8>().add(bytes) }.cast();
                v.iov_len -= bytes;
                return;
            }
            bytes -= v.iov_len;
            slot.iov_start += 1;
            slot.iov_count -= 1;
        }
    }

    pub fn range(&self, head: usize, i: usize) -> Range {
        self.ranges[head * DISCARD_SEG_MAX as usize + i]
    }
}
