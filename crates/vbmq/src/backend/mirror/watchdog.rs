//! The watchdog of a running mirror: a destination that stops answering while connected (a
//! hung host, a stopped process, a network that drops everything) would hold every guest
//! write sent to it, and a write blocked on the full socket would hold the guest's whole
//! queue. Once requests have been in flight with no answer for the mirror's timeout, the
//! watchdog fails the mirror and cuts the destination off: every request in flight fails,
//! and the guest's writes complete from the disk alone.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::run::Run;

/// How often the watchdog looks, at most.
const PERIOD: Duration = Duration::from_millis(100);

/// Starts the watchdog of `run`; it ends with the mirror.
pub fn start(run: Arc<Run>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("vbmq-mirror-watch".into())
        .spawn(move || {
            while !run.watch() {
                run.pause(PERIOD);
            }
        })
}
