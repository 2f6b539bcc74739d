//! One request's way through a worker: parsed and handed to the engine (or completed at once),
//! then completed into the used ring when the engine returns it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::guest::{GuestMemory, dirty_log};
use virtio_queue::{Queue, QueueT};
use vm_memory::Bytes;

use super::inflight::InFlight;
use crate::backend::{Engine, IoOp};
use crate::guest::inflight_region::InflightRecord;
use crate::timer::now_ns;
use crate::virtio_blk::{
    BlkDevice, Payload, Rejection, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, parse,
};
use crate::worker::{OpKind, QueueStats};

/// Everything a call needs, borrowed from the handler with the worker's memory snapshot.
pub(super) struct Ctx<'a> {
    /// The queue's index.
    pub queue: usize,
    pub mem: &'a GuestMemory,
    pub device: &'a BlkDevice,
    pub engine: Option<&'a mut Box<dyn Engine>>,
    pub inflight: &'a mut InFlight,
    pub stats: &'a QueueStats,
    /// The frontend's record of what is in flight, when it keeps one across restarts.
    pub record: Option<&'a mut InflightRecord>,
    /// The time, read once for the requests taken (or completed) together (0: not yet).
    pub clock: &'a mut u64,
    /// The frontend is migrating the VM: pages written by reads are marked in its dirty log.
    pub dirty_logging: &'a AtomicBool,
}

/// What serving a queue's requests takes, owned by its handler; each call borrows it as a
/// [`Ctx`], with the worker's memory snapshot.
pub(super) struct Requests {
    pub engine: Option<Box<dyn Engine>>,
    pub device: Arc<BlkDevice>,
    pub inflight: InFlight,
    pub stats: Arc<QueueStats>,
    /// The frontend's record of this queue's requests in flight, kept across restarts.
    pub record: Option<InflightRecord>,
    /// The connection's dirty logging is on (see `QueueWorker::log_dirty_pages_on`).
    pub dirty_logging: Arc<AtomicBool>,
    /// The time read for the requests of this pass (0: not yet; see [`Ctx::clock`]).
    pub clock: u64,
}

impl Requests {
    /// The context of a call on queue `queue` over `mem`, with the pass's clock.
    pub fn ctx<'a>(&'a mut self, queue: usize, mem: &'a GuestMemory) -> Ctx<'a> {
        Ctx {
            queue,
            mem,
            device: &self.device,
            engine: self.engine.as_mut(),
            inflight: &mut self.inflight,
            stats: &self.stats,
            record: self.record.as_mut(),
            clock: &mut self.clock,
            dirty_logging: &self.dirty_logging,
        }
    }
}

fn write_status(mem: &GuestMemory, addr: vm_memory::GuestAddress, status: u32) {
    // The address was checked when the request was parsed; a failure here is the guest's loss.
    let _ = mem.write_obj(u8::try_from(status).unwrap_or(1), addr);
}

/// Publishes a used entry; with an in-flight record, marks the request done around it so that
/// the record is right whenever the process dies.
fn add_used(
    record: Option<&InflightRecord>,
    queue: &mut Queue,
    mem: &GuestMemory,
    head: u16,
    len: u32,
) -> usize {
    if let Some(record) = record {
        record.publishing(head);
    }
    let added = match queue.add_used(mem, head, len) {
        Ok(()) => 1,
        Err(e) => {
            crate::limited!(debug, "cannot return descriptor {head}: {e}");
            0
        }
    };
    if let Some(record) = record
        && added > 0
    {
        // Not published: the record keeps it in flight, for a restart to take it again.
        record.published(head, queue.next_used());
    }
    added
}

/// Pushes the engine operations of the request at `head`, tagged with it, until one is
/// refused. Returns how many went and whether one was refused.
fn push_ops(engine: &mut dyn Engine, inflight: &InFlight, head: u16, ops: Ops) -> (u32, bool) {
    let h = usize::from(head);
    let mut pushed = 0;
    let mut push = |op| match engine.push(op, u64::from(head)) {
        Ok(()) => {
            pushed += 1;
            true
        }
        Err(e) => {
            crate::limited!(error, "queue engine refused a request: {e}");
            false
        }
    };
    let failed = match ops {
        Ops::One(op) => !push(op),
        Ops::Ranges { count, zeroes } => (0..count as usize).any(|i| {
            let range = inflight.range(h, i);
            let (offset, len) = (range.offset, range.len);
            let op = if zeroes {
                IoOp::WriteZeroes {
                    offset,
                    len,
                    unmap: range.unmap,
                }
            } else {
                IoOp::Discard { offset, len }
            };
            !push(op)
        }),
    };
    (pushed, failed)
}

/// What starting a request takes, read off its payload in one match.
struct Plan {
    /// Its kind, for the statistics.
    kind: OpKind,
    /// For a request that changes the disk (OUT, DISCARD, WRITE_ZEROES), the byte past the last
    /// it reaches: such a request may be refused, and holds a write ticket while in flight.
    changes_to: Option<u64>,
    /// The limits count it as a write (all but IN and GET_ID).
    limited_write: bool,
    /// Data bytes read into the guest (IN) or written from it (OUT).
    read: u32,
    written: u32,
    /// Bytes each engine operation must return, and the used length when all succeed.
    expect: u32,
    used_len: u32,
    /// Where a transfer starts on the disk, and its iovecs: a short one resumes from there.
    offset: u64,
    iov_count: u32,
    work: Work,
}

/// The request's work.
enum Work {
    /// Complete at once: a read or write of no bytes.
    Nothing,
    /// GET_ID: the serial, into `len` bytes of the iovecs.
    Serial { len: u32 },
    /// Engine operations.
    Engine(Ops),
}

/// The engine operations of a request.
enum Ops {
    /// One.
    One(IoOp),
    /// One discard or write-zeroes per range.
    Ranges { count: u32, zeroes: bool },
}

impl Ctx<'_> {
    /// Reads the plan of the request in slot `h` off its payload.
    fn plan(&self, payload: Payload, h: usize) -> Plan {
        let plan = |kind, changes_to, limited_write, work| Plan {
            kind,
            changes_to,
            limited_write,
            read: 0,
            written: 0,
            expect: 0,
            used_len: 1,
            offset: 0,
            iov_count: 0,
            work,
        };
        match payload {
            Payload::Read {
                offset,
                data_len,
                iov_count,
            } => Plan {
                read: data_len,
                expect: data_len,
                used_len: data_len + 1,
                offset,
                iov_count,
                ..plan(
                    OpKind::Read,
                    None,
                    false,
                    self.transfer(h, data_len, false, offset, iov_count),
                )
            },
            Payload::Write {
                offset,
                data_len,
                iov_count,
            } => Plan {
                written: data_len,
                expect: data_len,
                offset,
                iov_count,
                ..plan(
                    OpKind::Write,
                    Some(offset.saturating_add(u64::from(data_len))),
                    true,
                    self.transfer(h, data_len, true, offset, iov_count),
                )
            },
            Payload::Flush => plan(
                OpKind::Flush,
                None,
                true,
                Work::Engine(Ops::One(IoOp::Flush)),
            ),
            Payload::GetId {
                data_len,
                iov_count,
            } => Plan {
                iov_count,
                ..plan(OpKind::Read, None, false, Work::Serial { len: data_len })
            },
            Payload::Discard { ranges } => plan(
                OpKind::Other,
                Some(self.ranges_end(h, ranges)),
                true,
                Work::Engine(Ops::Ranges {
                    count: ranges,
                    zeroes: false,
                }),
            ),
            Payload::WriteZeroes { ranges } => plan(
                OpKind::Other,
                Some(self.ranges_end(h, ranges)),
                true,
                Work::Engine(Ops::Ranges {
                    count: ranges,
                    zeroes: true,
                }),
            ),
        }
    }

    /// A read's or write's engine operation; none for no bytes.
    fn transfer(&self, h: usize, data_len: u32, write: bool, offset: u64, iov_count: u32) -> Work {
        if data_len == 0 {
            return Work::Nothing;
        }
        let iov = self.inflight.iovecs(h, 0, iov_count);
        Work::Engine(Ops::One(if write {
            IoOp::Write { offset, iov }
        } else {
            IoOp::Read { offset, iov }
        }))
    }

    /// The byte past the last the `count` ranges in slot `h` reach.
    fn ranges_end(&self, h: usize, count: u32) -> u64 {
        (0..count as usize)
            .map(|i| {
                let range = self.inflight.range(h, i);
                range.offset.saturating_add(range.len)
            })
            .max()
            .unwrap_or(0)
    }

    /// The time for this batch of requests, read once.
    fn now(&mut self) -> u64 {
        if *self.clock == 0 {
            *self.clock = now_ns();
        }
        *self.clock
    }

    /// Marks the guest pages of `iov` in the dirty log, while the frontend keeps one.
    fn mark_dirty(&self, iov: crate::backend::IovList) {
        if !self.dirty_logging.load(Ordering::Acquire) || dirty_log::reads_unlogged() {
            return;
        }
        for v in iov.iovecs() {
            dirty_log::mark_host_range(self.mem, v.iov_base.cast_const().cast(), v.iov_len);
        }
    }

    /// Completes a request the parse refused: its status, where the chain has room for one.
    fn complete_rejected(&self, queue: &mut Queue, head: u16, rejection: &Rejection) -> usize {
        crate::limited!(debug, "request {head} rejected: {}", rejection.error);
        let status = u32::from(rejection.error.status());
        self.stats.record(OpKind::Other, status, 0, 0, 0);
        let len = match rejection.status {
            Some(addr) => {
                write_status(self.mem, addr, status);
                1
            }
            None => 0,
        };
        add_used(self.record.as_deref(), queue, self.mem, head, len)
    }

    /// Parses a chain and hands it to the engine, or completes it at once. Returns the used
    /// entries added.
    pub fn start(
        &mut self,
        queue: &mut Queue,
        chain: virtio_queue::DescriptorChain<&GuestMemory>,
    ) -> usize {
        let head = chain.head_index();
        let h = usize::from(head);
        if head >= queue.size() || h >= self.inflight.slots.len() {
            crate::limited!(debug, "descriptor head {head} outside the queue: dropped");
            return 0;
        }
        if self.inflight.slots[h].busy {
            crate::limited!(debug, "descriptor head {head} reused while in flight");
            return add_used(self.record.as_deref(), queue, self.mem, head, 0);
        }
        if let Some(record) = self.record.as_deref_mut() {
            record.taken(head);
        }
        let record = self.record.as_deref();
        let (iov, ranges) = self.inflight.buffers(h);
        let request = match parse(chain, self.mem, self.device, iov, ranges) {
            Ok(request) => request,
            Err(rejection) => return self.complete_rejected(queue, head, &rejection),
        };
        let plan = self.plan(request.payload, h);
        if plan.changes_to.is_some() && !self.device.may_write() {
            crate::limited!(
                warn,
                "write refused: another handover=on disk writes the image (its VM has not \
                 stopped)"
            );
            let status = VIRTIO_BLK_S_IOERR;
            self.stats.record(plan.kind, status, 0, 0, 0);
            write_status(self.mem, request.status, status);
            return add_used(record, queue, self.mem, head, 1);
        }
        if self.device.limits.on() {
            let bytes = u64::from(plan.read) + u64::from(plan.written);
            self.device.limits.charge(plan.limited_write, bytes);
        }
        let started_ns = self.now();
        let record = self.record.as_deref();
        let stats = self.stats;
        let kind = plan.kind;
        let complete_now = |status: u32, len: u32, queue: &mut Queue| {
            stats.record(kind, status, 0, 0, 0);
            write_status(self.mem, request.status, status);
            add_used(record, queue, self.mem, head, len)
        };
        let ops = match plan.work {
            Work::Nothing => return complete_now(VIRTIO_BLK_S_OK, 1, queue),
            Work::Serial { len } => {
                let n = (len as usize).min(self.device.serial.len());
                let iov = self.inflight.iovecs(h, 0, plan.iov_count);
                // SAFETY: the serial is host memory, apart from the guest buffers of `iov`.
                unsafe { iov.copy_in(0, self.device.serial.as_ptr(), n) };
                self.mark_dirty(iov);
                return complete_now(VIRTIO_BLK_S_OK, u32::try_from(n).unwrap_or(0) + 1, queue);
            }
            Work::Engine(ops) => ops,
        };
        let write_ticket = match plan.changes_to {
            Some(end) => {
                let ticket = self.device.writes.begin(self.queue);
                if !self.device.write_fits(end) {
                    // A shrinking resize came between the parse and now.
                    self.device.writes.end(self.queue, ticket);
                    return complete_now(VIRTIO_BLK_S_IOERR, 1, queue);
                }
                Some(ticket)
            }
            None => None,
        };
        let (device, queue_index) = (self.device, self.queue);
        let end_write = || {
            if let Some(ticket) = write_ticket {
                device.writes.end(queue_index, ticket);
            }
        };
        let Some(engine) = self.engine.as_deref_mut() else {
            end_write();
            return complete_now(VIRTIO_BLK_S_IOERR, 1, queue);
        };
        let (pushed, failed) = push_ops(&mut **engine, self.inflight, head, ops);
        if pushed == 0 {
            end_write();
            return complete_now(VIRTIO_BLK_S_IOERR, 1, queue);
        }
        let slot = &mut self.inflight.slots[h];
        slot.busy = true;
        slot.pending = pushed;
        slot.expect = plan.expect;
        slot.failed = failed;
        slot.used_len = plan.used_len;
        slot.status = request.status;
        slot.offset = plan.offset;
        slot.is_write = plan.written > 0;
        slot.write_ticket = write_ticket;
        slot.iov_start = 0;
        slot.iov_count = plan.iov_count;
        slot.kind = kind;
        slot.started_ns = started_ns;
        (slot.read, slot.written) = (plan.read, plan.written);
        self.inflight.count += 1;
        0
    }

    /// Records one engine completion.
    pub fn complete(&mut self, tag: u64, result: i32) {
        let Some(i) = usize::try_from(tag)
            .ok()
            .filter(|&i| self.inflight.slots.get(i).is_some_and(|slot| slot.busy))
        else {
            return;
        };
        let slot = &self.inflight.slots[i];
        // Checked after the kernel or the engine wrote the buffers: a migration that starts
        // later sends those pages in its first round anyway.
        if !slot.is_write && slot.read > 0 && self.dirty_logging.load(Ordering::Acquire) {
            self.mark_dirty(self.inflight.iovecs(i, slot.iov_start, slot.iov_count));
        }
        let slot = &mut self.inflight.slots[i];
        // A negative result is an errno: never equal to what is expected.
        let done = u32::try_from(result).ok();
        if done != Some(slot.expect) {
            // A read or write that moved some bytes but not all (a file that shrank, NFS,
            // FUSE, or one larger than the kernel moves in one call): the rest is asked
            // again, as QEMU does; only no progress is an error.
            if let Some(done) = done.filter(|&d| d > 0 && d < slot.expect && !slot.failed) {
                slot.expect -= done;
                slot.offset += u64::from(done);
                let h = usize::from(u16::try_from(tag).unwrap_or(u16::MAX));
                self.inflight.advance(h, done as usize);
                self.inflight
                    .retries
                    .push(u16::try_from(tag).unwrap_or(u16::MAX));
                return;
            }
            crate::limited!(
                debug,
                "request {tag}: result {result}, expected {}",
                slot.expect
            );
            slot.failed = true;
        }
        slot.pending -= 1;
        if slot.pending > 0 {
            return;
        }
        self.finish(tag);
    }

    /// Pushes again the rest of every read or write that came back short (a request
    /// the engine refuses fails).
    pub fn resubmit(&mut self, engine: &mut dyn Engine) {
        while let Some(head) = self.inflight.retries.pop() {
            let h = usize::from(head);
            let Some(slot) = self.inflight.slots.get(h) else {
                continue;
            };
            let (offset, is_write) = (slot.offset, slot.is_write);
            let iov = self.inflight.iovecs(h, slot.iov_start, slot.iov_count);
            let op = if is_write {
                IoOp::Write { offset, iov }
            } else {
                IoOp::Read { offset, iov }
            };
            if let Err(e) = engine.push(op, u64::from(head)) {
                crate::limited!(
                    error,
                    "queue engine refused the rest of a short transfer: {e}"
                );
                let slot = &mut self.inflight.slots[h];
                slot.failed = true;
                slot.pending -= 1;
                if slot.pending == 0 {
                    self.finish(u64::from(head));
                }
            }
        }
    }

    /// Completes the request in slot `tag` whose operations are all done: its status is written
    /// and its used entry waits for [`Self::publish_finished`].
    fn finish(&mut self, tag: u64) {
        let Some(slot) = usize::try_from(tag)
            .ok()
            .and_then(|i| self.inflight.slots.get_mut(i))
        else {
            return;
        };
        slot.busy = false;
        if let Some(ticket) = slot.write_ticket.take() {
            self.device.writes.end(self.queue, ticket);
        }
        let (status, len) = if slot.failed {
            (VIRTIO_BLK_S_IOERR, 1)
        } else {
            (VIRTIO_BLK_S_OK, slot.used_len)
        };
        let addr = slot.status;
        let (kind, started_ns) = (slot.kind, slot.started_ns);
        let (read, written) = (u64::from(slot.read), u64::from(slot.written));
        let latency = self.now().saturating_sub(started_ns);
        self.stats.record(kind, status, read, written, latency);
        self.inflight.count -= 1;
        write_status(self.mem, addr, status);
        // The slot exists, so the tag is a head index below the queue size.
        let head = u16::try_from(tag).unwrap_or(0);
        self.inflight.finished.push((head, len));
    }

    /// Publishes the used entries of the requests finished since the last call, with one update
    /// of the used index; returns the entries added. Those the used ring cannot take now (not
    /// mapped, while the frontend changes its memory table) stay for the next call, and in
    /// flight in the record.
    pub fn publish_finished(&mut self, queue: &mut Queue) -> usize {
        let finished = &mut self.inflight.finished;
        if finished.is_empty() {
            return 0;
        }
        let record = self.record.as_deref();
        if let Some(record) = record {
            // Last first: the record's batch list then starts with the first entry, so that a
            // death after part of the batch was published clears exactly that part.
            for &(head, _) in finished.iter().rev() {
                record.publishing(head);
            }
        }
        let before = queue.next_used();
        let result = queue.add_used_batch(self.mem, finished);
        let published = usize::from(queue.next_used().wrapping_sub(before)).min(finished.len());
        if let Some(record) = record {
            let heads = finished[..published].iter().map(|&(head, _)| head);
            record.published_batch(heads, queue.next_used());
        }
        finished.drain(..published);
        if let Err(e) = result {
            crate::limited!(
                debug,
                "cannot return {} finished descriptors yet: {e}",
                finished.len()
            );
            // A head the ring no longer has room for can never be returned.
            finished.retain(|&(head, _)| head < queue.size());
        }
        published
    }
}
