//! `VhostUserBackend` for a virtio-fs device: the high-priority queue and the request queues,
//! one epoll thread of the crate each, each queue served by that thread (pinned by `cpus=`) or,
//! in `poll` or `adaptive` mode on a CPU, by that CPU's shared thread, as disks' queues are
//! ([`QueueHandle`]).

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::connection::{Connection, config_bytes, refuse_set_config};
use super::queue_handle::QueueHandle;
use super::queue_set::QueueSet;
use super::socket::ConnectionBackend;
use crate::guest::{GuestMemory, Vring, dirty_log};
use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserProtocolFeatures,
    VhostUserVirtioFeatures,
};
use vhost_user_backend::{ShutdownHandle, VhostUserBackend, VhostUserDaemon, VringEpollHandler};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::{VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC};
use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};
use vmm_sys_util::epoll::EventSet;
use vmm_sys_util::event::{EventConsumer, EventNotifier};

use crate::virtio_fs::FsDevice;
use crate::virtio_fs::migration::{Direction, StateTransfer};
use crate::virtio_fs::queue::FsQueue;
use crate::worker::{QueueSettings, QueueStats};

/// A virtio-fs device served over one vhost-user connection.
pub struct VhostUserFs {
    device: Arc<FsDevice>,
    max_queue_size: u16,
    queues: QueueSet<FsQueue, VhostUserFs>,
    /// The frontend acked `VHOST_F_LOG_ALL`: a live migration is under way. Every reply and
    /// used entry is written through `vm-memory` and marks its pages itself (see
    /// [`dirty_log`]).
    dirty_logging: AtomicBool,
    /// The share's state moving to or from another backend (`SET_DEVICE_STATE_FD`).
    state_transfer: StateTransfer,
    connection: Connection,
}

impl VhostUserFs {
    /// A device over `device` with one worker per entry of `settings` (the high-priority queue
    /// first).
    pub fn new(
        device: Arc<FsDevice>,
        settings: &[QueueSettings],
        stats: &[Arc<QueueStats>],
    ) -> Self {
        let connection = Connection::new();
        let queues = settings
            .iter()
            .zip(stats)
            .enumerate()
            .map(|(index, (settings, stats))| {
                let worker = FsQueue::worker(
                    index,
                    *settings,
                    device.clone(),
                    connection.guest_memory.clone(),
                    stats.clone(),
                );
                QueueHandle::new(index, settings, worker, &connection)
            })
            .collect();
        VhostUserFs {
            max_queue_size: settings.first().map_or(1024, |s| s.max_size),
            device,
            queues: QueueSet::new(queues),
            dirty_logging: AtomicBool::new(false),
            state_transfer: StateTransfer::default(),
            connection,
        }
    }

    /// Gives the backend the epoll handlers of its daemon.
    pub fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<VhostUserFs>>>>) {
        self.queues.attach(handlers);
    }

    /// Gives the backend a way to close its connection, once the daemon has accepted one.
    pub fn connected(&self, handle: Option<ShutdownHandle>) {
        self.connection.connected(handle);
    }

    /// Stops every queue for good (a request is always completed within its pass), then
    /// closes the connection.
    pub fn disconnect(&self) {
        self.quiesce();
        self.connection.close();
    }

    fn quiesce(&self) {
        self.queues.stop_all();
    }

    /// Ends the connection: stops the queues, drops the daemon (which joins its threads) and
    /// only then closes the exit eventfds they polled.
    pub fn end(&self, daemon: VhostUserDaemon<Arc<VhostUserFs>>) {
        self.quiesce();
        drop(daemon);
        self.connection.close_exit_fds();
    }
}

impl VhostUserBackend for VhostUserFs {
    type Bitmap = dirty_log::DirtyLog;
    type Vring = Vring;

    fn num_queues(&self) -> usize {
        self.queues.len()
    }

    fn max_queue_size(&self) -> usize {
        usize::from(self.max_queue_size)
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
            | VhostUserVirtioFeatures::LOG_ALL.bits()
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        // No CONFIG unless asked (virtiofsd's `--tag`): QEMU's vhost-user-fs keeps the
        // configuration space itself.
        let features = VhostUserProtocolFeatures::MQ
            | VhostUserProtocolFeatures::REPLY_ACK
            | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
            | VhostUserProtocolFeatures::LOG_SHMFD
            | VhostUserProtocolFeatures::DEVICE_STATE;
        if self.device.offers_config() {
            features | VhostUserProtocolFeatures::CONFIG
        } else {
            features
        }
    }

    fn set_device_state_fd(
        &self,
        direction: VhostTransferStateDirection,
        phase: VhostTransferStatePhase,
        file: File,
    ) -> io::Result<Option<File>> {
        if phase != VhostTransferStatePhase::STOPPED {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "state transfer phase unknown",
            ));
        }
        let direction = match direction {
            VhostTransferStateDirection::SAVE => Direction::Save,
            VhostTransferStateDirection::LOAD => Direction::Load,
        };
        self.state_transfer
            .start(self.device.clone(), direction, file)?;
        Ok(None)
    }

    fn check_device_state(&self) -> io::Result<()> {
        let checked = self.state_transfer.check();
        match &checked {
            Ok(()) => crate::limited!(info, "share: state transfer done"),
            Err(e) => crate::limited!(warn, "share: state transfer failed: {e}"),
        }
        checked
    }

    fn acked_features(&self, features: u64) {
        if features & (1 << VIRTIO_F_VERSION_1) == 0 {
            crate::limited!(
                warn,
                "the frontend acked features {features:#x} without VIRTIO_F_VERSION_1: closing"
            );
            self.connection.close();
        }
        let on = features & VhostUserVirtioFeatures::LOG_ALL.bits() != 0;
        if self.dirty_logging.swap(on, Ordering::SeqCst) != on {
            crate::limited!(
                info,
                "share: dirty page logging {}",
                if on { "on" } else { "off" }
            );
        }
        dirty_log::set_logging(&self.connection.memory(), on);
    }

    fn set_event_idx(&self, _enabled: bool) {
        // The crate sets it on each vring; the workers read it from there.
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let config = self.device.config();
        config_bytes(&config, offset, size)
    }

    fn set_config(&self, offset: u32, buf: &[u8]) -> io::Result<()> {
        refuse_set_config(offset, buf)
    }

    fn update_memory(&self, mem: GuestMemoryAtomic<GuestMemory>) -> io::Result<()> {
        let map = mem.memory();
        self.connection.check_memory(&map)?;
        let logging = self.dirty_logging.load(Ordering::Acquire);
        dirty_log::carry_over(&self.connection.memory(), &map, logging);
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
        if let Some(queue) = self.queues.get(queue_index as usize) {
            // Whatever the driver broke is gone with the ring.
            queue.stop.stop_and_drain(&queue.worker).ring_stopped();
        }
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

impl ConnectionBackend for VhostUserFs {
    fn attach(&self, handlers: Vec<Arc<VringEpollHandler<Arc<Self>>>>) {
        VhostUserFs::attach(self, handlers);
    }

    fn connected(&self, handle: Option<ShutdownHandle>) {
        VhostUserFs::connected(self, handle);
    }

    fn disconnect(&self) {
        VhostUserFs::disconnect(self);
    }

    fn end(&self, daemon: VhostUserDaemon<Arc<Self>>) {
        VhostUserFs::end(self, daemon);
    }
}
