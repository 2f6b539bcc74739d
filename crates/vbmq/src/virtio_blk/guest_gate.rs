//! Whether a guest has started on a disk, and what must end before it does: a disk written
//! by NBD clients (`export-begin --writable`, a mirror's destination) stops taking their
//! writes the moment a guest's first ring starts, before the guest's first request is served.

use std::sync::Mutex;

/// What runs once, when the first ring starts.
type OnStart = Box<dyn FnOnce() + Send>;

/// A disk's guest gate.
#[derive(Default)]
pub struct GuestGate {
    state: Mutex<Gate>,
}

#[derive(Default)]
struct Gate {
    /// A ring has started since the disk was opened.
    started: bool,
    on_start: Option<OnStart>,
}

impl std::fmt::Debug for GuestGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestGate")
            .field("started", &self.has_started())
            .finish_non_exhaustive()
    }
}

impl GuestGate {
    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a ring has started since the disk was opened.
    pub fn has_started(&self) -> bool {
        self.gate().started
    }

    /// A ring starts: runs what waits for it (on the ring's thread, before its first request).
    pub fn ring_starts(&self) {
        let on_start = {
            let mut gate = self.gate();
            gate.started = true;
            gate.on_start.take()
        };
        if let Some(on_start) = on_start {
            on_start();
        }
    }

    /// Runs `on_start` when the first ring starts; refused (`false`) once one has, or while
    /// something else waits.
    pub fn before_start(&self, on_start: OnStart) -> bool {
        let mut gate = self.gate();
        if gate.started || gate.on_start.is_some() {
            return false;
        }
        gate.on_start = Some(on_start);
        true
    }

    /// Drops what waits for the first ring (its export ended first).
    pub fn clear(&self) {
        let taken = self.gate().on_start.take();
        drop(taken);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn the_first_ring_runs_what_waits_once_and_closes_the_gate() {
        let gate = GuestGate::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        assert!(gate.before_start(Box::new(move || {
            counted.fetch_add(1, Ordering::SeqCst);
        })));
        assert!(!gate.before_start(Box::new(|| {})), "one at a time");
        gate.ring_starts();
        gate.ring_starts();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(gate.has_started());
        assert!(
            !gate.before_start(Box::new(|| {})),
            "refused once a guest ran"
        );
    }
}
