//! A guest request served in parts (a read whose blocks live in different places, a write that
//! copies some blocks in first): answered once its last part completes, with the first error a
//! part met, else its whole length.

use std::io;

use super::slab::Slab;
use super::stage::{Below, Stage};
use crate::backend::iovec::IovList;

/// A request split in parts.
struct Parent {
    tag: u64,
    /// Parts in flight, plus one held while parts are still being queued.
    remaining: u32,
    error: i32,
    total: i32,
}

/// The requests of one queue's engine that are split in parts.
#[derive(Default)]
pub struct Splits {
    parents: Slab<Parent>,
}

impl Splits {
    /// Begins the guest's request `tag`, answered `total` if every part succeeds. It stays open
    /// while its parts are queued, whatever they do, until [`Splits::part_done`] is called once
    /// more than [`Splits::add_part`].
    pub fn begin(&mut self, tag: u64, total: i32) -> usize {
        self.parents.insert(Parent {
            tag,
            remaining: 1,
            error: 0,
            total,
        })
    }

    /// One more part of `parent` is in flight.
    pub fn add_part(&mut self, parent: usize) {
        if let Some(p) = self.parents.get_mut(parent) {
            p.remaining += 1;
        }
    }

    /// `parent` fails with `error` (`-errno`), unless it failed already.
    pub fn fail(&mut self, parent: usize, error: i32) {
        if let Some(p) = self.parents.get_mut(parent)
            && p.error == 0
        {
            p.error = error;
        }
    }

    /// One part of `parent` finished with `error` (0: fine); the last one answers the guest.
    pub fn part_done<S: Stage>(&mut self, below: &mut Below<S>, parent: usize, error: i32) {
        if error != 0 {
            self.fail(parent, error);
        }
        let Some(p) = self.parents.get_mut(parent) else {
            return;
        };
        p.remaining -= 1;
        if p.remaining == 0
            && let Some(p) = self.parents.take(parent)
        {
            below.answer(p.tag, if p.error != 0 { p.error } else { p.total });
        }
    }
}

/// A part of a split request in the engine below: its own iovecs, pieces of the guest's, kept
/// until it completes.
pub struct Part {
    /// The request it is part of.
    pub parent: usize,
    _iovs: Vec<libc::iovec>,
    expect: usize,
}

// SAFETY: the raw pointers are guest iovecs, valid until the part is reaped (the `Engine::push`
// contract); it moves between threads only with its queue's engine.
unsafe impl Send for Part {}

impl Part {
    /// Bytes `[at, at + len)` of `iov`, for `parent`: the part, and the list to hand below.
    pub fn of(parent: usize, iov: IovList, at: usize, len: usize) -> (Part, IovList) {
        let iovs = iov.slice(at, len);
        // No more iovecs than the guest's list, whose count is a u32.
        let count = u32::try_from(iovs.len()).unwrap_or(u32::MAX);
        // SAFETY: the iovecs are pieces of the guest's, kept in the part until it is reaped.
        let list = unsafe { IovList::new(iovs.as_ptr(), count) };
        let part = Part {
            parent,
            _iovs: iovs,
            expect: len,
        };
        (part, list)
    }

    /// A part that moves no bytes into or out of the guest's buffers (write-zeroes).
    pub fn without_data(parent: usize) -> Part {
        Part {
            parent,
            _iovs: Vec::new(),
            expect: 0,
        }
    }

    /// Its error (0: fine), from its `result` below.
    #[inline]
    pub fn error(&self, result: i32) -> i32 {
        transfer_error(result, self.expect)
    }
}

/// 0 when `result` (bytes or `-errno`) is the `expect` bytes asked; its error, or `-EIO` for a
/// short transfer.
#[inline]
pub fn transfer_error(result: i32, expect: usize) -> i32 {
    if result < 0 {
        result
    } else if usize::try_from(result).is_ok_and(|n| n == expect) {
        0
    } else {
        -libc::EIO
    }
}

/// The guest's result for `e`: its `-errno`, `-EIO` when it has none.
pub fn errno(e: &io::Error) -> i32 {
    -e.raw_os_error().unwrap_or(libc::EIO)
}
