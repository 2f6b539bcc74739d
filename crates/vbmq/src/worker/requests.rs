//! One request's way through a worker: parsed and handed to the engine (or completed at once),
//! then completed into the used ring when the engine returns it.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::guest::{GuestMemory, dirty_log};
use virtio_queue::{Queue, QueueT};
use vm_memory::Bytes;

use super::inflight::InFlight;
use super::stats::{OpKind, QueueStats};
use crate::backend::{Engine, IoOp};
use crate::guest::inflight_region::InflightRecord;
use crate::timer::now_ns;
use crate::virtio_blk::{BlkDevice, RequestType, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, parse};

/// Everything a pass needs, borrowed apart from the worker so the queue lock can be held.
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
    pub clock: u64,
    /// The frontend is migrating the VM: pages written by reads are marked in its dirty log.
    pub dirty_logging: &'a AtomicBool,
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

fn kind_of(kind: RequestType) -> OpKind {
    match kind {
        RequestType::In | RequestType::GetId => OpKind::Read,
        RequestType::Out => OpKind::Write,
        RequestType::Flush => OpKind::Flush,
        RequestType::Discard | RequestType::WriteZeroes => OpKind::Other,
    }
}

impl Ctx<'_> {
    /// The byte past the last a write, discard or write-zeroes in slot `h` reaches.
    fn request_end(&self, request: &crate::virtio_blk::Request, h: usize) -> u64 {
        match request.kind {
            RequestType::Out => request.offset.saturating_add(u64::from(request.data_len)),
            _ => (0..request.range_count as usize)
                .map(|i| {
                    let range = self.inflight.range(h, i);
                    range.offset.saturating_add(range.len)
                })
                .max()
                .unwrap_or(0),
        }
    }

    /// The time for this batch of requests, read once.
    fn now(&mut self) -> u64 {
        if self.clock == 0 {
            self.clock = now_ns();
        }
        self.clock
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
            Err(rejection) => {
                crate::limited!(debug, "request {head} rejected: {}", rejection.error);
                let status = u32::from(rejection.error.status());
                self.stats.record(OpKind::Other, status, 0, 0, 0);
                let len = match rejection.status {
                    Some(addr) => {
                        write_status(self.mem, addr, u32::from(rejection.error.status()));
                        1
                    }
                    None => 0,
                };
                return add_used(record, queue, self.mem, head, len);
            }
        };
        if matches!(
            request.kind,
            RequestType::Out | RequestType::Discard | RequestType::WriteZeroes
        ) && !self.device.may_write()
        {
            crate::limited!(
                warn,
                "write refused: another handover=on disk writes the image (its VM has not \
                 stopped)"
            );
            let status = VIRTIO_BLK_S_IOERR;
            self.stats.record(kind_of(request.kind), status, 0, 0, 0);
            write_status(self.mem, request.status, status);
            return add_used(record, queue, self.mem, head, 1);
        }
        if self.device.limits.on() {
            let write = !matches!(request.kind, RequestType::In | RequestType::GetId);
            let bytes = match request.kind {
                RequestType::In | RequestType::Out => u64::from(request.data_len),
                _ => 0,
            };
            self.device.limits.charge(write, bytes);
        }
        let started_ns = self.now();
        let record = self.record.as_deref();
        let stats = self.stats;
        let kind = kind_of(request.kind);
        let complete_now = |status: u32, len: u32, queue: &mut Queue| {
            stats.record(kind, status, 0, 0, 0);
            write_status(self.mem, request.status, status);
            add_used(record, queue, self.mem, head, len)
        };
        let (ops, expect, used_len) = match request.kind {
            RequestType::GetId => {
                let n = (request.data_len as usize).min(self.device.serial.len());
                let iov = self.inflight.iovecs(h, 0, request.iov_count);
                // SAFETY: the serial is host memory, apart from the guest buffers of `iov`.
                unsafe { iov.copy_in(0, self.device.serial.as_ptr(), n) };
                self.mark_dirty(iov);
                return complete_now(VIRTIO_BLK_S_OK, u32::try_from(n).unwrap_or(0) + 1, queue);
            }
            RequestType::In | RequestType::Out if request.data_len == 0 => {
                return complete_now(VIRTIO_BLK_S_OK, 1, queue);
            }
            RequestType::In => (1, request.data_len, request.data_len + 1),
            RequestType::Out | RequestType::Flush => (1, request.data_len, 1),
            RequestType::Discard | RequestType::WriteZeroes => (request.range_count, 0, 1),
        };
        let write_ticket = match request.kind {
            RequestType::Out | RequestType::Discard | RequestType::WriteZeroes => {
                let ticket = self.device.writes.begin(self.queue);
                if !self.device.write_fits(self.request_end(&request, h)) {
                    // A shrinking resize came between the parse and now.
                    self.device.writes.end(self.queue, ticket);
                    return complete_now(VIRTIO_BLK_S_IOERR, 1, queue);
                }
                Some(ticket)
            }
            _ => None,
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
        let mut pushed = 0;
        let mut failed = false;
        for i in 0..ops {
            let op = match request.kind {
                RequestType::In => IoOp::Read {
                    offset: request.offset,
                    iov: self.inflight.iovecs(h, 0, request.iov_count),
                },
                RequestType::Out => IoOp::Write {
                    offset: request.offset,
                    iov: self.inflight.iovecs(h, 0, request.iov_count),
                },
                RequestType::Flush => IoOp::Flush,
                RequestType::Discard => {
                    let range = self.inflight.range(h, i as usize);
                    IoOp::Discard {
                        offset: range.offset,
                        len: range.len,
                    }
                }
                RequestType::WriteZeroes | RequestType::GetId => {
                    let range = self.inflight.range(h, i as usize);
                    IoOp::WriteZeroes {
                        offset: range.offset,
                        len: range.len,
                        unmap: range.unmap,
                    }
                }
            };
            if let Err(e) = engine.push(op, u64::from(head)) {
                crate::limited!(error, "queue engine refused a request: {e}");
                failed = true;
                break;
            }
            pushed += 1;
        }
        if pushed == 0 {
            end_write();
            return complete_now(VIRTIO_BLK_S_IOERR, 1, queue);
        }
        let slot = &mut self.inflight.slots[h];
        slot.busy = true;
        slot.pending = pushed;
        slot.expect = expect;
        slot.failed = failed;
        slot.used_len = used_len;
        slot.status = request.status;
        slot.offset = request.offset;
        slot.is_write = request.kind == RequestType::Out;
        slot.write_ticket = write_ticket;
        slot.iov_start = 0;
        slot.iov_count = request.iov_count;
        slot.kind = kind;
        slot.started_ns = started_ns;
        (slot.read, slot.written) = match request.kind {
            RequestType::In => (request.data_len, 0),
            RequestType::Out => (0, request.data_len),
            _ => (0, 0),
        };
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
