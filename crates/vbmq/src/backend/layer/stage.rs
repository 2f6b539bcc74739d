//! A layer's queue engine, written once: what every layer that keeps state per operation
//! (staging buffers, split requests) shares. The engine below gets a tag of this layer's
//! [`Below`] slab for each operation; results decided without it (a cache hit, a dropped
//! discard) wait in a list; each reaping pass hands the completions below to the layer's
//! [`Stage::complete`], submits what the layer queued while doing so, then answers the worker.
//! Dropped with operations in flight, it waits for them: the kernel writes into the layer's
//! buffers until they complete.

use std::io;
use std::os::fd::RawFd;

use super::slab::Slab;
use crate::backend::{Engine, IoOp};
use crate::host_size;

/// What a layer's engine does with operations: the part that differs from layer to layer.
pub trait Stage: Send + Sized {
    /// What the layer keeps of an operation it handed below, until that completes.
    type Pending: Send;
    /// The engine below: a boxed `dyn Engine`, or a storage's own engine when the layer needs
    /// more of it than [`Engine`] gives (thin disks read their base through it).
    type Below: Engine;
    /// Names the layer in the log.
    const NAME: &'static str;

    /// Takes the guest's operation `op`: forwards operations below, or answers at once.
    fn push(&mut self, below: &mut Below<Self>, op: IoOp, tag: u64) -> io::Result<()>;

    /// An operation below completed with `result` (bytes or `-errno`): answer the guest's
    /// request through `below`, or forward more.
    fn complete(&mut self, below: &mut Below<Self>, pending: Self::Pending, result: i32);

    /// The end of a reaping pass, before the answers go out.
    fn end_pass(&mut self, below: &mut Below<Self>) {
        let _ = below;
    }

    /// Blocks until a completion is ready (one may be already).
    fn wait(&mut self, below: &mut Below<Self>) -> io::Result<()> {
        below.wait()
    }

    /// An operation completed after the worker went away: nothing is answered, and the guest's
    /// memory may be gone.
    fn abandon(&mut self, pending: Self::Pending) {
        drop(pending);
    }

    /// The engine below cannot be waited for: keep every buffer it may still write into (the
    /// operations in flight are leaked already).
    fn leak(&mut self) {}
}

/// The engine below a layer, the operations handed to it and the answers ready for the worker.
pub struct Below<S: Stage> {
    engine: S::Below,
    in_flight: Slab<S::Pending>,
    answers: Vec<(u64, i32)>,
    reaped: Vec<(u64, i32)>,
    /// Something was forwarded since the last submit.
    queued: bool,
}

impl<S: Stage> Below<S> {
    /// Hands `op` to the engine below on behalf of `pending`; refused, `pending` is dropped.
    pub fn forward(&mut self, op: IoOp, pending: S::Pending) -> io::Result<()> {
        self.forward_with(pending, |engine, tag| engine.push(op, tag))
    }

    /// As [`Below::forward`], with `push` queuing the operation under `tag`.
    pub fn forward_with(
        &mut self,
        pending: S::Pending,
        push: impl FnOnce(&mut S::Below, u64) -> io::Result<()>,
    ) -> io::Result<()> {
        let slot = self.in_flight.insert(pending);
        match push(&mut self.engine, slot as u64) {
            Ok(()) => {
                self.queued = true;
                Ok(())
            }
            Err(e) => {
                self.in_flight.take(slot);
                Err(e)
            }
        }
    }

    /// Answers the guest's request `tag` with `result`, at the end of this pass or the next.
    pub fn answer(&mut self, tag: u64, result: i32) {
        self.answers.push((tag, result));
    }

    /// Whether answers wait for the next reap.
    pub fn has_answers(&self) -> bool {
        !self.answers.is_empty()
    }

    /// Operations handed below and not completed yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The engine below.
    pub fn engine(&self) -> &S::Below {
        &self.engine
    }

    /// Hands queued operations below.
    pub fn submit(&mut self) -> io::Result<()> {
        self.queued = false;
        self.engine.submit()
    }

    /// Waits for the engine below, unless answers are ready already.
    pub fn wait(&mut self) -> io::Result<()> {
        if self.answers.is_empty() {
            self.queued = false;
            self.engine.wait()
        } else {
            self.submit()
        }
    }

    /// Takes the completions below, with what each was for.
    fn reap_below(&mut self, each: &mut impl FnMut(&mut Self, S::Pending, i32)) {
        let mut reaped = std::mem::take(&mut self.reaped);
        self.engine
            .reap(&mut |tag, result| reaped.push((tag, result)));
        for (tag, result) in reaped.drain(..) {
            if let Some(pending) = self.in_flight.take(host_size(tag)) {
                each(self, pending, result);
            }
        }
        self.reaped = reaped;
    }
}

/// A layer's engine: `S` over the engine below.
pub struct StagedEngine<S: Stage> {
    stage: S,
    below: Below<S>,
}

impl<S: Stage> StagedEngine<S> {
    /// `stage` over `below`.
    pub fn new(stage: S, below: S::Below) -> Self {
        StagedEngine {
            stage,
            below: Below {
                engine: below,
                in_flight: Slab::new(),
                answers: Vec::new(),
                reaped: Vec::new(),
                queued: false,
            },
        }
    }
}

impl<S: Stage> Engine for StagedEngine<S> {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        self.stage.push(&mut self.below, op, tag)
    }

    fn submit(&mut self) -> io::Result<()> {
        self.below.submit()
    }

    fn wait(&mut self) -> io::Result<()> {
        self.stage.wait(&mut self.below)
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        let stage = &mut self.stage;
        self.below
            .reap_below(&mut |below, pending, result| stage.complete(below, pending, result));
        self.stage.end_pass(&mut self.below);
        if self.below.queued
            && let Err(e) = self.below.submit()
        {
            crate::limited!(debug, "{}: submit: {e}", S::NAME);
        }
        for (tag, result) in self.below.answers.drain(..) {
            done(tag, result);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        self.below.engine.completion_fd()
    }

    unsafe fn guest_memory(&mut self, regions: &[libc::iovec]) -> io::Result<()> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.below.engine.guest_memory(regions) }
    }
}

impl<S: Stage> Drop for StagedEngine<S> {
    fn drop(&mut self) {
        while !self.below.in_flight.is_empty() {
            if let Err(e) = self.below.engine.wait() {
                crate::limited!(error, "{}: cannot wait for I/O to finish: {e}", S::NAME);
                // Leaked rather than freed: the kernel may still write into them.
                for pending in self.below.in_flight.drain() {
                    std::mem::forget(pending);
                }
                self.stage.leak();
                return;
            }
            let stage = &mut self.stage;
            self.below
                .reap_below(&mut |_, pending, _| stage.abandon(pending));
        }
    }
}
