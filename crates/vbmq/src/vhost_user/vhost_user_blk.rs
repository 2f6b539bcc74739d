//! `VhostUserBackend` for a virtio-blk device: one epoll thread per virtqueue (the crate's),
//! each queue served by that thread or by its CPU's shared thread ([`QueueHandle`]).

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::guest::{GuestMemory, Vring};
use vhost::vhost_user::message::{
    VhostUserInflight, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::vhost_user::{Backend, VhostUserFrontendReqHandler};
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VhostUserDaemon, VringEpollHandler};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

use super::connection::{Connection, config_bytes, lock, refuse_set_config};
use super::queue_handle::QueueHandle;
use super::queue_set::QueueSet;
use super::socket::ConnectionBackend;
use crate::backend::{Disk, Engine};
use crate::guest::{dirty_log, inflight_region};
use crate::virtio_blk::queue::BlkQueue;
use crate::virtio_blk::{BlkDevice, config_space};
use crate::worker::{QueueSettings, QueueStats};

/// A virtio-blk device served over one vhost-user connection.
pub struct VhostUserBlk {
    device: Arc<BlkDevice>,
    max_queue_size: u16,
    queues: QueueSet<BlkQueue, VhostUserBlk>,
    /// Guest memory, the way to close the connection, the crate threads' exit eventfds.
    connection: Connection,
    /// Offer `VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD`.
    inflight: bool,
    /// The channel to the frontend, for configuration change notices.
    backend_req: Mutex<Option<Backend>>,
    /// The frontend acked `VHOST_F_LOG_ALL`: a live migration is under way (see [`dirty_log`]).
    dirty_logging: Arc<AtomicBool>,
}

impl VhostUserBlk {
    /// A device over `disk` with one worker per entry of `settings`.
    pub fn new(
        device: Arc<BlkDevice>,
        disk: Arc<dyn Disk>,
        settings: &[QueueSettings],
        stats: &[Arc<QueueStats>],
    ) -> Self {
        let connection = Connection::new();
        let dirty_logging = Arc::new(AtomicBool::new(false));
        let queues = settings
            .iter()
            .zip(stats)
            .enumerate()
            .map(|(index, (settings, stats))| {
                let mut worker = BlkQueue::worker(
                    index,
                    *settings,
                    device.clone(),
                    disk.clone(),
                    connection.guest_memory.clone(),
                    stats.clone(),
                );
                worker.log_dirty_pages_on(dirty_logging.clone());
                QueueHandle::new(index, settings, worker, &connection)
            })
            .collect();
        VhostUserBlk {
            max_queue_size: settings.first().map_or(256, |s| s.max_size),
            device,
            queues: QueueSet::new(queues),
            connection,
            inflight: true,
            backend_req: Mutex::new(None),
            dirty_logging,
        }
    }

    /// Tells the frontend the configuration changed (the capacity, after a resize): QEMU then
    /// reads it again and raises the guest's configuration interrupt. Sent from a thread of
    /// its own: a frontend that never answers stalls no one.
    pub fn config_changed(&self) {
        let Some(channel) = lock(&self.backend_req).clone() else {
            crate::limited!(
                info,
                "the frontend gave no backend channel: the guest sees the new capacity when it \
                 next reads the configuration"
            );
            return;
        };
        let sent = std::thread::Builder::new()
            .name("vbmq-config".into())
            .spawn(move || {
                if let Err(e) = channel.handle_config_change() {
                    crate::limited!(warn, "configuration change notice not delivered: {e}");
                }
            });
        if let Err(e) = sent {
            crate::limited!(warn, "cannot send the configuration change notice: {e}");
        }
    }

    /// Offers in-flight tracking, or not.
    pub fn with_inflight_tracking(mut self, on: bool) -> Self {
        self.inflight = on;
        self
    }

    /// Lends each queue's worker its engine, created before the process was confined.
    pub fn lend_engines(&self, engines: Vec<Option<Box<dyn Engine>>>) {
        for (queue, engine) in self.queues.iter().zip(engines) {
            queue.lock().lend_engine(engine);
        }
    }

    /// Takes the engines back once the connection has ended (after [`Self::end`]).
    pub fn take_engines(&self) -> Vec<Option<Box<dyn Engine>>> {
        self.queues
            .iter()
            .map(|queue| queue.lock().take_engine())
            .collect()
    }

    /// Gives the backend the epoll handlers of its daemon.
    pub fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<VhostUserBlk>>>>) {
        self.queues.attach(handlers);
    }

    /// Gives the backend a way to close its connection, once the daemon has accepted one.
    pub fn connected(&self, connection: Option<ShutdownHandle>) {
        self.connection.connected(connection);
    }

    /// Closes the connection now, or as soon as [`Self::connected`] gives its handle.
    fn close_connection(&self) {
        self.connection.close();
    }

    /// Completes what is in flight, then closes the connection: the disk is being removed.
    pub fn disconnect(&self) {
        self.quiesce();
        self.close_connection();
    }

    /// Stops every queue for good, completing what is in flight first.
    pub fn quiesce(&self) {
        self.queues.stop_all();
        self.device.stop_writing();
    }

    /// Ends the connection: completes what is in flight, stops the queues, drops the daemon
    /// (which joins its threads) and only then closes the exit eventfds they polled.
    pub fn end(&self, daemon: VhostUserDaemon<Arc<VhostUserBlk>>) {
        self.quiesce();
        drop(daemon);
        self.connection.close_exit_fds();
    }
}

impl VhostUserBackend for VhostUserBlk {
    type Bitmap = dirty_log::DirtyLog;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        self.queues.len()
    }

    fn max_queue_size(&self) -> usize {
        usize::from(self.max_queue_size)
    }

    fn features(&self) -> u64 {
        self.device.features()
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
            | VhostUserVirtioFeatures::LOG_ALL.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        let features = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::CONFIG
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::BACKEND_REQ
            | VhostUserProtocolFeatures::LOG_SHMFD;
        if self.inflight {
            features | VhostUserProtocolFeatures::INFLIGHT_SHMFD
        } else {
            features
        }
    }

    fn get_inflight_fd(
        &self,
        inflight: &VhostUserInflight,
    ) -> io::Result<(VhostUserInflight, File)> {
        inflight_region::create(inflight, self.queues.len())
    }

    fn set_inflight_fd(&self, inflight: &VhostUserInflight, file: File) -> io::Result<()> {
        let records = inflight_region::map(inflight, &file, self.queues.len())?;
        // Only between runs of the rings: a queue's thread holds its worker while it serves,
        // and a record changed under requests in flight would lose them.
        let holds: Vec<_> = self.queues.iter().map(|queue| queue.stop.hold()).collect();
        let workers: Vec<_> = self.queues.iter().map(|queue| queue.lock()).collect();
        let busy = workers.iter().any(|worker| worker.in_flight() > 0);
        if !busy {
            let mut records = records.into_iter();
            for mut worker in workers {
                worker.set_inflight_record(records.next());
            }
        } else {
            drop(workers);
        }
        drop(holds);
        if busy {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "SET_INFLIGHT_FD while requests are in flight",
            ));
        }
        Ok(())
    }

    fn acked_features(&self, features: u64) {
        // vbmq is a VIRTIO 1.x device only: a driver without VERSION_1 would frame requests in
        // the legacy ways. The crate has already acknowledged the message; end the connection.
        if features & (1 << VIRTIO_F_VERSION_1) == 0 {
            crate::limited!(
                warn,
                "the frontend acked features {features:#x} without VIRTIO_F_VERSION_1: closing"
            );
            self.close_connection();
        }
        self.set_dirty_logging(features & VhostUserVirtioFeatures::LOG_ALL.bits() != 0);
    }

    fn set_config(&self, offset: u32, buf: &[u8]) -> io::Result<()> {
        // Every field vbmq offers is read-only (`writeback` is writable only with
        // VIRTIO_BLK_F_CONFIG_WCE, which it does not offer): refused, and NACKed with REPLY_ACK.
        refuse_set_config(offset, buf)
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The crate sets it on each vring; the workers read it from there.
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        // Made anew each time: the capacity changes with a resize.
        let config = config_space(&self.device);
        config_bytes(&config, offset, size)
    }

    fn set_backend_req_fd(&self, backend: Backend) {
        *lock(&self.backend_req) = Some(backend);
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemory>) -> io::Result<()> {
        let map = mem.memory();
        self.connection.check_memory(&map)?;
        // A table changed during a migration: the new regions log to the same log.
        if let Some(log) = dirty_log::log_memory(&self.connection.memory())
            && let Err(e) = dirty_log::inherit_log(&map, &log)
        {
            crate::limited!(
                warn,
                "the dirty log does not cover the new memory table: {e}"
            );
        }
        dirty_log::set_logging(&map, self.dirty_logging.load(Ordering::Acquire));
        // The queues switch to it themselves, once their in-flight requests have completed.
        self.connection.replace_memory((*map).clone());
        Ok(())
    }

    fn queues_per_thread(&self) -> Vec<u64> {
        (0..self.queues.len()).map(|i| 1u64 << i).collect()
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        self.connection.exit_event()
    }

    fn stop_vring(&self, queue_index: u32) -> io::Result<()> {
        let Some(queue) = self.queues.get(queue_index as usize) else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let mut worker = queue.stop.stop_and_drain(&queue.worker);
        worker.ring_stopped();
        let (waited, in_flight) = (worker.waited, worker.drained);
        drop(worker);
        crate::limited!(
            debug,
            "queue {queue_index} stopped in {} us ({} us to take it, {in_flight} requests drained)",
            started.elapsed().as_micros(),
            waited.as_micros()
        );
        // The frontend stops its rings when its VM stops (the source at the end of a
        // migration): a disk sharing the image may write from now on.
        self.device.stop_writing();
        Ok(())
    }

    fn handle_event(
        &self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[Vring],
        thread_id: usize,
    ) -> io::Result<()> {
        self.queues
            .handle_event(device_event, vrings, thread_id, &self.connection);
        Ok(())
    }
}

impl VhostUserBlk {
    /// Turns the marking of dirty pages on or off, in the regions (for writes through
    /// `vm-memory`) and for the workers (for the buffers of reads).
    fn set_dirty_logging(&self, on: bool) {
        let was = self.dirty_logging.swap(on, Ordering::SeqCst);
        dirty_log::set_logging(&self.connection.memory(), on);
        if on != was {
            crate::limited!(info, "dirty page logging {}", if on { "on" } else { "off" });
        }
    }
}

impl ConnectionBackend for VhostUserBlk {
    fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<Self>>>>) {
        VhostUserBlk::attach(self, handlers);
    }

    fn connected(&self, handle: Option<ShutdownHandle>) {
        VhostUserBlk::connected(self, handle);
    }

    fn disconnect(&self) {
        VhostUserBlk::disconnect(self);
    }

    fn end(&self, daemon: VhostUserDaemon<Arc<Self>>) {
        VhostUserBlk::end(self, daemon);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use vhost_user_backend::VhostUserBackend;

    use super::VhostUserBlk;
    use crate::backend::{Disk, NullDisk};
    use crate::virtio_blk::BlkDevice;
    use crate::worker::{QueueSettings, WaitMode};

    /// The connection ends (`quiesce`) while the frontend stops a ring (`GET_VRING_BASE`): the
    /// queue must stay stopped for good, whichever comes last.
    #[test]
    fn a_ring_stopped_after_quiesce_stays_stopped() {
        let disk: Arc<dyn Disk> = Arc::new(NullDisk::new(1 << 20));
        let device = Arc::new(BlkDevice::new(disk.as_ref(), false, 1, ""));
        let settings = [QueueSettings::unpinned(WaitMode::Event, 16)];
        let blk = VhostUserBlk::new(device, disk, &settings, &[Default::default()]);
        blk.quiesce();
        assert!(blk.queues[0].stop.is_set());
        blk.stop_vring(0).unwrap();
        assert!(
            blk.queues[0].stop.is_set(),
            "GET_VRING_BASE cleared the stop that quiesce set"
        );
        let _hold = blk.queues[0].stop.hold();
        blk.stop_vring(0).unwrap();
        assert!(blk.queues[0].stop.is_set(), "cleared under another stopper");
    }
}
