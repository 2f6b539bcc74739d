//! Engines whose operations finish while they are pushed (a copy in host memory, no device):
//! one adapter keeps their results, in order, for the worker's next reap.

use std::io;
use std::os::fd::RawFd;

use super::{Engine, IoOp};

/// An operation carried out at once; returns bytes or `-errno`, as a completion would.
pub trait Execute: Send {
    /// Carries out `op`. The iovecs it points to are valid for the call (see [`Engine::push`]).
    fn execute(&mut self, op: IoOp) -> i32;
}

/// [`Engine`] over an [`Execute`]: no system call, no wake-up.
pub struct Immediate<E> {
    inner: E,
    done: Vec<(u64, i32)>,
}

impl<E: Execute> Immediate<E> {
    /// An engine over `inner` with room for `depth` results between reaps.
    pub fn new(inner: E, depth: u32) -> Self {
        Immediate {
            inner,
            done: Vec::with_capacity(depth as usize),
        }
    }
}

impl<E: Execute> Engine for Immediate<E> {
    fn push(&mut self, op: IoOp, tag: u64) -> io::Result<()> {
        let result = self.inner.execute(op);
        self.done.push((tag, result));
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn wait(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn reap(&mut self, done: &mut dyn FnMut(u64, i32)) {
        for (tag, result) in self.done.drain(..) {
            done(tag, result);
        }
    }

    fn completion_fd(&self) -> Option<RawFd> {
        None
    }
}
