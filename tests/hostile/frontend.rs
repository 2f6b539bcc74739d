//! A vhost-user frontend that plays the guest: it owns guest memory, sets up a split queue with
//! vhost's `Frontend`, and lets a test write any descriptor, ring index and header it likes.

use std::path::Path;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{VhostUserConfigFlags, VhostUserHeaderFlag};
use vhost::vhost_user::{
    Frontend, VhostUserFrontend, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::{VhostBackend, VringConfigData};
use virtio_bindings::virtio_blk::*;
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::VIRTIO_RING_F_INDIRECT_DESC;

use vbmq::test_utils::SplitRing;
use virtio_queue::desc::split::Descriptor;
use vmm_sys_util::eventfd::EventFd;

use super::memory::GuestRam;

/// Where the queue lives in guest memory; the mock lays out table, avail and used from here.
pub const RING_BASE: u64 = 0;
/// Everything below is rings; scratch allocations start here.
pub const SCRATCH_START: u64 = 0x8000;

/// The virtio-blk config fields the battery needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlkConfig {
    pub capacity: u64,
    pub seg_max: u32,
    pub max_discard_seg: u32,
    pub max_write_zeroes_seg: u32,
    pub num_queues: u16,
    pub features: u64,
}

#[derive(Clone, Copy, Debug)]
pub struct UsedElem {
    pub id: u32,
    pub len: u32,
}

pub struct Guest {
    pub ram: GuestRam,
    pub frontend: Frontend,
    kick: EventFd,
    call: EventFd,
    pub queue_size: u16,
    pub queue_index: usize,
    /// The driver's side of the queue: table, avail and used ring, indices.
    pub ring: SplitRing,
    pub config: BlkConfig,
    protocol: VhostUserProtocolFeatures,
    /// The last used entries seen, (used index, id, len), for failure reports.
    pub history: std::collections::VecDeque<(u16, u32, u32)>,
}

pub fn wanted_features() -> u64 {
    [
        VIRTIO_F_VERSION_1,
        VIRTIO_RING_F_INDIRECT_DESC,
        VIRTIO_BLK_F_SEG_MAX,
        VIRTIO_BLK_F_BLK_SIZE,
        VIRTIO_BLK_F_FLUSH,
        VIRTIO_BLK_F_TOPOLOGY,
        VIRTIO_BLK_F_MQ,
        VIRTIO_BLK_F_RO,
        VIRTIO_BLK_F_DISCARD,
        VIRTIO_BLK_F_WRITE_ZEROES,
    ]
    .iter()
    .fold(
        VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits(),
        |acc, bit| acc | 1 << bit,
    )
}

impl Guest {
    /// Connects and negotiates, without setting up memory or queues.
    pub fn handshake(socket: &Path, ram: GuestRam) -> vhost::Result<Self> {
        let mut frontend = Frontend::connect(socket, u64::from(u16::MAX))?;
        frontend.set_owner()?;
        let offered = frontend.get_features()?;
        let mut protocol = VhostUserProtocolFeatures::empty();
        if offered & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            let wanted = VhostUserProtocolFeatures::CONFIG
                | VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::CONFIGURE_MEM_SLOTS
                | VhostUserProtocolFeatures::INFLIGHT_SHMFD
                | VhostUserProtocolFeatures::LOG_SHMFD;
            protocol = frontend.get_protocol_features()? & wanted;
            frontend.set_protocol_features(protocol)?;
        }
        frontend.set_features(offered & wanted_features())?;
        let mut guest = Guest {
            ram,
            frontend,
            kick: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            call: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            queue_size: 0,
            queue_index: 0,
            ring: SplitRing::at(RING_BASE, 1),
            config: BlkConfig {
                features: offered,
                ..Default::default()
            },
            protocol,
            history: Default::default(),
        };
        if protocol.contains(VhostUserProtocolFeatures::CONFIG) {
            guest.read_config()?;
        }
        Ok(guest)
    }

    /// A ready guest: memory table sent and queue `queue_index` running.
    pub fn connect(socket: &Path, queue_size: u16) -> vhost::Result<Self> {
        let mut guest = Self::handshake(socket, GuestRam::new())?;
        // Setup errors must surface, not be silently dropped.
        guest.want_acks(true);
        guest.frontend.set_mem_table(&guest.ram.regions())?;
        guest.start_queue(0, queue_size)?;
        guest.want_acks(false);
        Ok(guest)
    }

    fn read_config(&mut self) -> vhost::Result<()> {
        let size = std::mem::size_of::<virtio_blk_config>() as u32;
        let buf = vec![0u8; size as usize];
        let (_, payload) =
            self.frontend
                .get_config(0, size, VhostUserConfigFlags::empty(), &buf)?;
        let le32 = |at: usize| u32::from_le_bytes(payload[at..at + 4].try_into().unwrap());
        let le16 = |at: usize| u16::from_le_bytes(payload[at..at + 2].try_into().unwrap());
        self.config.capacity = u64::from_le_bytes(payload[0..8].try_into().unwrap());
        self.config.seg_max = le32(std::mem::offset_of!(virtio_blk_config, seg_max));
        self.config.num_queues = le16(std::mem::offset_of!(virtio_blk_config, num_queues));
        self.config.max_discard_seg =
            le32(std::mem::offset_of!(virtio_blk_config, max_discard_seg));
        self.config.max_write_zeroes_seg = le32(std::mem::offset_of!(
            virtio_blk_config,
            max_write_zeroes_seg
        ));
        Ok(())
    }

    /// Asks for an acknowledgement of every following message (when REPLY_ACK was negotiated),
    /// so a refused message shows up as an error.
    pub fn want_acks(&self, on: bool) -> bool {
        let flags = if on {
            VhostUserHeaderFlag::NEED_REPLY
        } else {
            VhostUserHeaderFlag::empty()
        };
        self.frontend.set_hdr_flags(flags);
        self.protocol.contains(VhostUserProtocolFeatures::REPLY_ACK)
    }

    /// Lays out a split queue of `size` at RING_BASE as virtio 1.x section 2.7 does: the
    /// descriptor table, then the avail ring (flags, idx, ring, used_event), then the used ring
    /// aligned to 4. (virtio-queue's MockSplitQueue overlaps avail and used above 64 entries.)
    pub fn vring_config(&mut self, size: u16) -> VringConfigData {
        self.ring = SplitRing::at(RING_BASE, size);
        VringConfigData {
            queue_max_size: size,
            queue_size: size,
            flags: 0,
            desc_table_addr: self.ram.host_addr(self.ring.desc),
            used_ring_addr: self.ram.host_addr(self.ring.used),
            avail_ring_addr: self.ram.host_addr(self.ring.avail),
            log_addr: None,
        }
    }

    pub fn start_queue(&mut self, index: usize, size: u16) -> vhost::Result<()> {
        self.queue_size = size;
        self.queue_index = index;
        // Fresh rings: zero the ring area.
        self.ram
            .write(RING_BASE, &vec![0u8; SCRATCH_START as usize]);
        let config = self.vring_config(size);
        let fe = &mut self.frontend;
        fe.set_vring_num(index, size)?;
        fe.set_vring_addr(index, &config)?;
        fe.set_vring_base(index, 0)?;
        fe.set_vring_call(index, &self.call)?;
        fe.set_vring_kick(index, &self.kick)?;
        if self.config.features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            fe.set_vring_enable(index, true)?;
        }
        Ok(())
    }

    /// Writes one descriptor into a table (the queue's or an indirect one).
    pub fn write_desc(&self, table: u64, index: u32, desc: Descriptor) {
        self.ring.write_desc(&self.ram.mem, table, index, desc);
    }

    /// Places heads on the avail ring, publishes the index and kicks.
    pub fn publish(&mut self, heads: &[u16]) {
        self.ring.publish(&self.ram.mem, heads);
        self.kick();
    }

    /// Publishes an arbitrary avail index (a lying guest).
    pub fn publish_avail_idx(&mut self, idx: u16) {
        self.ring.publish_avail_idx(&self.ram.mem, idx);
        self.kick();
    }

    /// Waits until vbmq has closed the connection (the socket reads end-of-file); false if it is
    /// still open after `timeout`.
    pub fn closed_by_vbmq(&self, timeout: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let fd = self.frontend.as_raw_fd();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let mut byte = 0u8;
            // SAFETY: peeks at most one byte into a local from a socket the frontend owns.
            let n = unsafe {
                libc::recv(
                    fd,
                    (&mut byte as *mut u8).cast(),
                    1,
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            if n == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }

    pub fn kick(&self) {
        self.kick.write(1).unwrap();
    }

    pub fn used_idx(&self) -> u16 {
        self.ring.used_idx(&self.ram.mem)
    }

    /// Waits until `count` new used entries appear (or `timeout`), and returns what appeared.
    pub fn wait_used(&mut self, count: usize, timeout: Duration) -> Vec<UsedElem> {
        let deadline = Instant::now() + timeout;
        while usize::from(self.used_idx().wrapping_sub(self.ring.used_seen())) < count
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.take_used()
    }

    /// Consumes whatever new used entries there are.
    pub fn take_used(&mut self) -> Vec<UsedElem> {
        let first = self.ring.used_seen();
        let used = self.ring.take_used(&self.ram.mem);
        for (i, &(id, len)) in used.iter().enumerate() {
            if self.history.len() == 12 {
                self.history.pop_front();
            }
            self.history
                .push_back((first.wrapping_add(i as u16), id, len));
        }
        used.into_iter()
            .map(|(id, len)| UsedElem { id, len })
            .collect()
    }
}
