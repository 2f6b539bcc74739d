//! A virtio-fs client over vhost-user: it connects to a backend's socket (vbmq's `--fs` or
//! virtiofsd), shares its memory, sets up the high-priority queue and one request queue, sends
//! FUSE INIT, and then serves requests one at a time ([`FsClient::call`]) or many in flight
//! ([`FsClient::submit`], [`FsClient::reap`]). Completions are found by spinning on the used ring,
//! as a polling guest driver would; the backend is kicked only when it asks to be.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use vhost::vhost_user::message::{
    VhostTransferStateDirection, VhostTransferStatePhase, VhostUserHeaderFlag,
};
use vhost::vhost_user::{
    Frontend, VhostUserFrontend, VhostUserProtocolFeatures, VhostUserVirtioFeatures,
};
use vhost::{VhostBackend, VringConfigData};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::VRING_USED_F_NO_NOTIFY;
use vm_memory::{ByteValued, Bytes, GuestAddress};
use vmm_sys_util::eventfd::EventFd;

use crate::fuse::{
    self, AttrOut, EntryOut, GetattrIn, InitIn, KERNEL_MINOR_VERSION, KERNEL_VERSION, Opcode,
    OpenIn, OpenOut, OutHeader, ReadIn, ReleaseIn,
};
use crate::{Buffer, GuestRam, SplitRing};

/// Entries of each ring; each request in flight takes two.
pub const QUEUE_SIZE: u16 = 256;
/// Requests a client can have in flight.
pub const SLOTS: u16 = QUEUE_SIZE / 2;
const RAM_SIZE: usize = 64 << 20;
const RING_SPAN: u64 = 0x1_0000;
const SLOTS_BASE: u64 = 4 * RING_SPAN;
const REQUEST_ROOM: u64 = 4096;
/// Room for a reply: its header and up to 128 KiB of data.
pub const REPLY_ROOM: u64 = (128 << 10) + 4096;
const SLOT_SPAN: u64 = REQUEST_ROOM + REPLY_ROOM;
/// A reply that has not come by then is an error (a hung backend must not hang the caller).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

struct Queue {
    ring: SplitRing,
    kick: EventFd,
    _call: EventFd,
}

/// One connection to a virtio-fs backend.
pub struct FsClient {
    frontend: Frontend,
    ram: GuestRam,
    queues: Vec<Queue>,
    unique: u64,
    /// The features acked (without `VHOST_F_LOG_ALL`).
    features: u64,
    /// How long [`Self::call`] waits for a reply.
    reply_timeout: Duration,
}

impl FsClient {
    /// Connects to `socket`, sets up the queues and sends FUSE INIT.
    pub fn connect(socket: &Path) -> io::Result<Self> {
        let mut client = Self::connect_without_init(socket)?;
        client.init()?;
        Ok(client)
    }

    /// Connects to `socket` and sets up the queues; the FUSE session is not started (a hostile
    /// guest sending requests before INIT; [`Self::init`] starts it).
    pub fn connect_without_init(socket: &Path) -> io::Result<Self> {
        let mut frontend = Frontend::connect(socket, 2).map_err(other)?;
        frontend.set_owner().map_err(other)?;
        let offered = frontend.get_features().map_err(other)?;
        if offered & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            let wanted = VhostUserProtocolFeatures::MQ
                | VhostUserProtocolFeatures::REPLY_ACK
                | VhostUserProtocolFeatures::LOG_SHMFD
                | VhostUserProtocolFeatures::DEVICE_STATE;
            let protocol = frontend.get_protocol_features().map_err(other)? & wanted;
            frontend.set_protocol_features(protocol).map_err(other)?;
        }
        let wanted = (1 << VIRTIO_F_VERSION_1) | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits();
        let features = offered & wanted;
        frontend.set_features(features).map_err(other)?;
        let ram = GuestRam::new(RAM_SIZE)?;
        frontend.set_mem_table(&ram.regions()).map_err(other)?;
        let mut client = FsClient {
            frontend,
            ram,
            queues: Vec::new(),
            unique: 0,
            features,
            reply_timeout: REPLY_TIMEOUT,
        };
        for index in 0..2 {
            client.start_queue(index, offered)?;
        }
        Ok(client)
    }

    fn start_queue(&mut self, index: usize, features: u64) -> io::Result<()> {
        let ring = SplitRing::at(RING_SPAN * index as u64, QUEUE_SIZE);
        let config = VringConfigData {
            queue_max_size: QUEUE_SIZE,
            queue_size: QUEUE_SIZE,
            flags: 0,
            desc_table_addr: self.ram.host_addr(ring.desc),
            used_ring_addr: self.ram.host_addr(ring.used),
            avail_ring_addr: self.ram.host_addr(ring.avail),
            log_addr: None,
        };
        let kick = EventFd::new(libc::EFD_NONBLOCK)?;
        let call = EventFd::new(libc::EFD_NONBLOCK)?;
        let fe = &mut self.frontend;
        fe.set_vring_num(index, QUEUE_SIZE).map_err(other)?;
        fe.set_vring_addr(index, &config).map_err(other)?;
        fe.set_vring_base(index, 0).map_err(other)?;
        fe.set_vring_call(index, &call).map_err(other)?;
        fe.set_vring_kick(index, &kick).map_err(other)?;
        if features & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits() != 0 {
            fe.set_vring_enable(index, true).map_err(other)?;
        }
        // A round trip: every message before it has been handled when it returns.
        fe.set_hdr_flags(VhostUserHeaderFlag::empty());
        fe.get_features().map_err(other)?;
        // The client finds completions by polling: no interrupts (VRING_AVAIL_F_NO_INTERRUPT).
        self.ram
            .mem
            .store(1u16.to_le(), GuestAddress(ring.avail), Ordering::Release)
            .map_err(other)?;
        self.queues.push(Queue {
            ring,
            kick,
            _call: call,
        });
        Ok(())
    }

    /// FUSE INIT.
    pub fn init(&mut self) -> io::Result<()> {
        let init = InitIn {
            major: KERNEL_VERSION,
            minor: KERNEL_MINOR_VERSION,
            max_readahead: 1 << 20,
            flags: 0,
        };
        let (out, _) = self.call(Opcode::Init, 0, fuse::args(&init), &[], 4096)?;
        check(&out)
    }

    /// Where slot `slot`'s request and reply live (guest addresses).
    pub fn slot_addrs(slot: u16) -> (u64, u64) {
        let base = SLOTS_BASE + SLOT_SPAN * u64::from(slot % SLOTS);
        (base, base + REQUEST_ROOM)
    }

    /// Puts a request in `slot` with room for `reply_len` bytes of reply, and makes it
    /// available; the backend is kicked by [`Self::kick`].
    pub fn submit(&mut self, slot: u16, request: &[u8], reply_len: u32) -> io::Result<()> {
        let (req_at, reply_at) = Self::slot_addrs(slot);
        if request.len() as u64 > REQUEST_ROOM || u64::from(reply_len) > REPLY_ROOM {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        self.ram
            .mem
            .write_slice(request, GuestAddress(req_at))
            .map_err(other)?;
        let buffers = [
            Buffer::readable(req_at, request.len() as u32),
            Buffer::writable(reply_at, reply_len),
        ];
        self.submit_buffers(slot, &buffers);
        Ok(())
    }

    /// Writes `request` into `slot` again, over the chain [`Self::submit`] framed there for a
    /// request of the same length, without making it available ([`Self::offer`] does): a
    /// driver reusing its buffers writes only what changed.
    pub fn rewrite(&mut self, slot: u16, request: &[u8]) -> io::Result<()> {
        let (req_at, _) = Self::slot_addrs(slot);
        if request.len() as u64 > REQUEST_ROOM {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        self.ram
            .mem
            .write_slice(request, GuestAddress(req_at))
            .map_err(other)
    }

    /// Makes the chains framed in `slots` available together, with one update of the avail
    /// index.
    pub fn offer(&mut self, slots: &[u16]) {
        let queue = &mut self.queues[1];
        let heads: Vec<u16> = slots.iter().map(|slot| (slot % SLOTS) * 2).collect();
        queue.ring.publish(&self.ram.mem, &heads);
    }

    /// Makes any chain available in `slot` (a request the tests frame by hand; at most two
    /// buffers, the slot's share of the table).
    pub fn submit_buffers(&mut self, slot: u16, buffers: &[Buffer]) {
        let mem = &self.ram.mem;
        let queue = &mut self.queues[1];
        let head =
            queue
                .ring
                .write_chain(mem, (slot % SLOTS) * 2, &buffers[..buffers.len().min(2)]);
        queue.ring.publish(mem, &[head]);
    }

    /// Publishes any avail index on the request queue and kicks (a lying driver).
    pub fn publish_avail_idx(&mut self, idx: u16) -> io::Result<()> {
        let queue = &mut self.queues[1];
        queue.ring.publish_avail_idx(&self.ram.mem, idx);
        queue.kick.write(1)
    }

    /// The request queue's avail index as this client last published it.
    pub fn avail_idx(&self) -> u16 {
        self.queues[1].ring.avail_idx()
    }

    /// Waits until the backend has closed the connection; false if it is still open after
    /// `timeout`.
    pub fn closed_by_backend(&self, timeout: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            let mut byte = 0u8;
            // SAFETY: peeks at most one byte into a local from a socket the frontend owns.
            let n = unsafe {
                libc::recv(
                    self.frontend.as_raw_fd(),
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

    /// As [`Self::submit_buffers`] with up to four buffers: the chain also takes the table
    /// entries of slot `slot + 1`, which must not be in flight.
    pub fn submit_wide(&mut self, slot: u16, buffers: &[Buffer]) {
        let head = self.frame(slot, buffers);
        let queue = &mut self.queues[1];
        queue.ring.publish(&self.ram.mem, &[head]);
    }

    /// Writes a chain of up to four buffers in `slot` (and `slot + 1`'s table entries, as
    /// [`Self::submit_wide`]) without making it available: [`Self::offer`] makes several
    /// available at once. Returns its head.
    pub fn frame(&mut self, slot: u16, buffers: &[Buffer]) -> u16 {
        let first = (slot % (SLOTS - 1)) * 2;
        self.queues[1]
            .ring
            .write_chain(&self.ram.mem, first, &buffers[..buffers.len().min(4)])
    }

    /// Cuts the memory file to `len` bytes under the backend's mapping, as a hostile frontend
    /// may: the backend's next access past it faults. The rings live below
    /// [`Self::slot_addrs`]`(0)`; this client must not touch memory past `len` afterwards.
    pub fn truncate_memory(&self, len: u64) -> io::Result<()> {
        self.ram.truncate(len)
    }

    /// Logs dirty pages as a migrating frontend does: `SET_LOG_BASE` with `log` (one bit per
    /// 4 KiB page of guest memory from address 0), then `SET_FEATURES` with `VHOST_F_LOG_ALL`.
    /// `None` acks the features without it again (a finished or cancelled migration).
    pub fn log_dirty_pages(&mut self, log: Option<&std::fs::File>) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let log_all = VhostUserVirtioFeatures::LOG_ALL.bits();
        let Some(log) = log else {
            self.frontend.set_features(self.features).map_err(other)?;
            return self.frontend.get_features().map(|_| ()).map_err(other);
        };
        let region = vhost::VhostUserDirtyLogRegion {
            mmap_size: log.metadata()?.len(),
            mmap_offset: 0,
            mmap_handle: log.as_raw_fd(),
        };
        self.frontend.set_log_base(0, Some(region)).map_err(other)?;
        self.frontend
            .set_features(self.features | log_all)
            .map_err(other)?;
        // A round trip: the backend logs before the next request is made available.
        self.frontend.get_features().map(|_| ()).map_err(other)
    }

    /// Takes the backend's state as a migration's source does: `SET_DEVICE_STATE_FD` (save)
    /// with a pipe, read to its end, then `CHECK_DEVICE_STATE`.
    pub fn save_state(&mut self) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let (read, write) = pipe()?;
        self.frontend
            .set_device_state_fd(
                VhostTransferStateDirection::SAVE,
                VhostTransferStatePhase::STOPPED,
                write,
            )
            .map_err(other)?;
        let mut state = Vec::new();
        std::fs::File::from(read).read_to_end(&mut state)?;
        self.frontend.check_device_state().map_err(other)?;
        Ok(state)
    }

    /// Gives the backend `state` as a migration's destination does: `SET_DEVICE_STATE_FD`
    /// (load) with a pipe, `state` written and the pipe closed, then `CHECK_DEVICE_STATE`.
    pub fn load_state(&mut self, state: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let (read, write) = pipe()?;
        self.frontend
            .set_device_state_fd(
                VhostTransferStateDirection::LOAD,
                VhostTransferStatePhase::STOPPED,
                read,
            )
            .map_err(other)?;
        // The backend may refuse and close early: the check reports why.
        let _ = std::fs::File::from(write).write_all(state);
        self.frontend.check_device_state().map_err(other)
    }

    /// The guest address of the request queue's used ring.
    pub fn used_ring(&self) -> u64 {
        self.queues[1].ring.used
    }

    /// The guest memory, for requests framed by hand.
    pub fn memory(&self) -> &vm_memory::GuestMemoryMmap<()> {
        &self.ram.mem
    }

    /// Waits for one completion: (slot, bytes written); `None` after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<(u16, u32)> {
        let deadline = Instant::now() + timeout;
        let mut done = Vec::new();
        while done.is_empty() && Instant::now() < deadline {
            std::hint::spin_loop();
            self.reap(&mut done);
        }
        done.first().copied()
    }

    /// Tells the backend new requests are available, unless it said it needs no telling.
    pub fn kick(&mut self) -> io::Result<()> {
        let mem = &self.ram.mem;
        let queue = &self.queues[1];
        let flags: u16 = mem
            .load(GuestAddress(queue.ring.used), Ordering::Acquire)
            .map_err(other)?;
        if u32::from(flags) & VRING_USED_F_NO_NOTIFY == 0 {
            queue.kick.write(1)?;
        }
        Ok(())
    }

    /// Completed requests since the last call: (slot, bytes of reply written).
    pub fn reap(&mut self, out: &mut Vec<(u16, u32)>) {
        let mem = &self.ram.mem;
        let queue = &mut self.queues[1];
        for (head, len) in queue.ring.take_used(mem) {
            out.push(((head / 2) as u16, len));
        }
    }

    /// The reply header in `slot`.
    pub fn reply_header(&self, slot: u16) -> io::Result<OutHeader> {
        let (_, reply_at) = Self::slot_addrs(slot);
        self.ram.mem.read_obj(GuestAddress(reply_at)).map_err(other)
    }

    /// The next request id.
    pub fn next_unique(&mut self) -> u64 {
        self.unique += 1;
        self.unique
    }

    /// How long [`Self::call`] waits for a reply (10 s unless set): a client that must notice a
    /// backend gone sooner (the thrasher's, across kills) sets less.
    pub fn set_reply_timeout(&mut self, timeout: Duration) {
        self.reply_timeout = timeout;
    }

    /// Sends one request and waits for its reply: the header and the bytes after it.
    pub fn call(
        &mut self,
        opcode: Opcode,
        node: u64,
        args: &[u8],
        names: &[&[u8]],
        reply_len: u32,
    ) -> io::Result<(OutHeader, Vec<u8>)> {
        self.call_as((0, 0), opcode, node, args, names, reply_len)
    }

    /// As [`Self::call`], sent by the guest's user and group `ids` (the request header's).
    pub fn call_as(
        &mut self,
        ids: (u32, u32),
        opcode: Opcode,
        node: u64,
        args: &[u8],
        names: &[&[u8]],
        reply_len: u32,
    ) -> io::Result<(OutHeader, Vec<u8>)> {
        let unique = self.next_unique();
        let request = fuse::request_as(ids, opcode, unique, node, args, names);
        self.submit(0, &request, reply_len)?;
        self.kick()?;
        let (_, written) = self
            .wait(self.reply_timeout)
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "no reply"))?;
        let written = written as usize;
        let (_, reply_at) = Self::slot_addrs(0);
        let mut reply = vec![0u8; written];
        self.ram
            .mem
            .read_slice(&mut reply, GuestAddress(reply_at))
            .map_err(other)?;
        let header_len = size_of::<OutHeader>();
        if written < header_len {
            // FORGET has no reply; anything else without one is the backend's failure.
            return Ok((OutHeader::default(), Vec::new()));
        }
        let header = OutHeader::from_slice(&reply[..header_len])
            .copied()
            .ok_or_else(|| other("short reply"))?;
        Ok((header, reply[header_len..].to_vec()))
    }

    /// LOOKUP of `name` in directory `parent`.
    pub fn lookup(&mut self, parent: u64, name: &str) -> io::Result<EntryOut> {
        let (out, body) = self.call(Opcode::Lookup, parent, &[], &[name.as_bytes()], 4096)?;
        check(&out)?;
        parse(&body)
    }

    /// GETATTR of `node`.
    pub fn getattr(&mut self, node: u64) -> io::Result<AttrOut> {
        let args = GetattrIn::default();
        let (out, body) = self.call(Opcode::Getattr, node, fuse::args(&args), &[], 4096)?;
        check(&out)?;
        parse(&body)
    }

    /// FORGET of `count` lookups of `node` (no reply).
    pub fn forget(&mut self, node: u64, count: u64) -> io::Result<()> {
        let args = fuse_backend_rs::abi::fuse_abi::ForgetIn { nlookup: count };
        self.call(Opcode::Forget, node, fuse::args(&args), &[], 4096)
            .map(|_| ())
    }

    /// OPEN of `node` with `flags`; returns the file handle.
    pub fn open(&mut self, node: u64, flags: u32) -> io::Result<u64> {
        let args = OpenIn {
            flags,
            fuse_flags: 0,
        };
        let (out, body) = self.call(Opcode::Open, node, fuse::args(&args), &[], 4096)?;
        check(&out)?;
        parse::<OpenOut>(&body).map(|open| open.fh)
    }

    /// RELEASE of handle `fh` of `node`.
    pub fn release(&mut self, node: u64, fh: u64) -> io::Result<()> {
        let args = ReleaseIn {
            fh,
            ..ReleaseIn::default()
        };
        let (out, _) = self.call(Opcode::Release, node, fuse::args(&args), &[], 4096)?;
        check(&out)
    }

    /// A READ request of `size` bytes at `offset` of handle `fh`, for [`Self::submit`].
    pub fn read_request(&mut self, node: u64, fh: u64, offset: u64, size: u32) -> Vec<u8> {
        let args = ReadIn {
            fh,
            offset,
            size,
            ..ReadIn::default()
        };
        let unique = self.next_unique();
        fuse::request(Opcode::Read, unique, node, fuse::args(&args), &[])
    }
}

/// A pipe: (read end, write end).
fn pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors the kernel writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors nothing else owns.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

fn check(out: &OutHeader) -> io::Result<()> {
    if out.error == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(-out.error))
    }
}

fn parse<T: ByteValued>(body: &[u8]) -> io::Result<T> {
    body.get(..size_of::<T>())
        .and_then(T::from_slice)
        .copied()
        .ok_or_else(|| other("short reply"))
}
