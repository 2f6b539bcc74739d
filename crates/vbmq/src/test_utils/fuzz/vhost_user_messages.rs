//! A frontend's vhost-user messages, as raw bytes on the socket, against the real backend
//! (vbmq's `VhostUserBlk` inside rust-vmm's `VhostUserDaemon`): lying sizes, unknown requests,
//! vring indexes past the queues, config reads at any offset. vbmq must answer or close the
//! connection, never panic, and the next frontend must be served.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Disk, NullDisk};
use crate::guest::GuestMemory;
use crate::vhost_user::VhostUserBlk;
use crate::virtio_blk::BlkDevice;
use crate::worker::QueueSettings;
use crate::worker::WaitMode;
use vhost::vhost_user::Listener;
use vhost_user_backend::VhostUserDaemon;
use vm_memory::GuestMemoryAtomic;

fn serve_one(bytes: &[u8]) {
    let dir = std::env::temp_dir().join(format!("vbmq-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("vhost.sock");
    let mut listener = Listener::new(&path, true).expect("listener");

    let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
    let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 2, ""));
    let settings: Vec<QueueSettings> = (0..2)
        .map(|_| QueueSettings::unpinned(WaitMode::Event, 64))
        .collect();
    let stats: Vec<_> = settings.iter().map(|_| Arc::default()).collect();
    let atomic = GuestMemoryAtomic::new(GuestMemory::new());
    let backend = Arc::new(VhostUserBlk::new(device, disk, &settings, &stats));
    let mut daemon =
        VhostUserDaemon::new("vbmq-fuzz".into(), backend.clone(), atomic).expect("daemon");
    backend.attach(daemon.get_epoll_handlers());

    // The whole input is queued on the socket before the daemon accepts it, then the writing
    // side is closed: the daemon handles what it can and ends on the end of the stream.
    let mut frontend = match UnixStream::connect(&path) {
        Ok(stream) => stream,
        Err(e) => panic!("connect: {e}"),
    };
    let _ = frontend.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = frontend.write_all(bytes);
    let _ = frontend.shutdown(std::net::Shutdown::Write);
    if daemon.start(&mut listener).is_ok() {
        // Replies pile up unread in the socket buffer; the daemon must not block on them.
        let _ = daemon.wait();
    }
    backend.end(daemon);
    drop(frontend);
}

/// One input: raw bytes from a frontend into a fresh backend.
pub fn vhost_user_messages(bytes: &[u8]) {
    if bytes.len() <= 64 * 1024 {
        serve_one(bytes);
    }
}
