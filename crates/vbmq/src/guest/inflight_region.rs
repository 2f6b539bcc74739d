//! In-flight I/O tracking (the vhost-user spec's "Inflight I/O tracking", split rings): a shared
//! memory region that the frontend keeps across backend restarts. Each queue's record marks the
//! requests taken off the avail ring and not yet returned on the used ring, so a backend started
//! after a crash submits exactly those again, in the order they were taken.
//!
//! The record is consistent at any instant the process can die: a request is marked before it
//! runs, and cleared only after its used entry is published, with `last_batch_head`/`used_idx`
//! telling which clear a crash may have cut short. The frontend can write the region at any time:
//! every value read from it is bounds-checked, and only its own copy of the sizes is trusted.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU64, Ordering};

use vhost::vhost_user::message::VhostUserInflight;

/// The region's layout version.
const VERSION: u16 = 1;
/// A queue record's header: features (u64), version, desc_num, last_batch_head, used_idx (u16).
const HEADER: usize = 16;
/// One descriptor's state: inflight (u8), padding, next (u16 at 6), counter (u64 at 8).
const DESC_STATE: usize = 16;
/// Queue records start on this alignment (as DPDK and libvhost-user lay them out).
const ALIGN: usize = 64;
/// The largest split ring (virtio 1.x, 2.7).
const MAX_QUEUE_SIZE: u16 = 32768;

/// Bytes of one queue's record for a ring of `queue_size` entries.
pub fn queue_record_size(queue_size: u16) -> usize {
    (HEADER + DESC_STATE * usize::from(queue_size)).next_multiple_of(ALIGN)
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.into())
}

/// Checks the queue count and size a frontend asks for; returns the region's size.
fn region_size(inflight: &VhostUserInflight, max_queues: usize) -> io::Result<usize> {
    let queues = usize::from(inflight.num_queues);
    if queues == 0 || queues > max_queues {
        return Err(invalid(format!(
            "in-flight region for {queues} queues: the device has {max_queues}"
        )));
    }
    let size = inflight.queue_size;
    if size == 0 || size > MAX_QUEUE_SIZE || !size.is_power_of_two() {
        return Err(invalid(format!("in-flight region for {size}-entry queues")));
    }
    Ok(queue_record_size(size) * queues)
}

/// `GET_INFLIGHT_FD`: a new, zeroed region for the queues the frontend names, sealed against
/// resizing so that no one can make it shorter under a process that maps it.
pub fn create(
    inflight: &VhostUserInflight,
    max_queues: usize,
) -> io::Result<(VhostUserInflight, File)> {
    let size = region_size(inflight, max_queues)?;
    // SAFETY: a NUL-terminated name; the flags are valid for memfd_create.
    let fd = unsafe {
        libc::memfd_create(
            c"vbmq-inflight".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size as u64)?;
    let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
    // SAFETY: F_ADD_SEALS on a descriptor this function owns.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let reply = VhostUserInflight {
        mmap_size: size as u64,
        mmap_offset: 0,
        num_queues: inflight.num_queues,
        queue_size: inflight.queue_size,
    };
    Ok((reply, file))
}

/// A region mapped into this process; unmapped when the last queue record goes.
struct Mapping {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `addr`/`len` are a mapping this struct made and nothing else unmaps.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
    }
}

/// `SET_INFLIGHT_FD`: maps the region in `file` and returns one record per queue it covers.
/// The file must be sealed against shrinking (as [`create`] makes it), or a frontend could cut it
/// short under the queues that write it.
pub fn map(
    inflight: &VhostUserInflight,
    file: &File,
    max_queues: usize,
) -> io::Result<Vec<InflightRecord>> {
    let size = region_size(inflight, max_queues)?;
    if inflight.mmap_size < size as u64 {
        return Err(invalid(format!(
            "in-flight region of {} bytes: {size} needed",
            inflight.mmap_size
        )));
    }
    let offset = inflight.mmap_offset;
    if !offset.is_multiple_of(4096) || libc::off_t::try_from(offset).is_err() {
        return Err(invalid(format!("in-flight region at offset {offset}")));
    }
    // SAFETY: F_GET_SEALS on a descriptor the caller owns.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(invalid(
            "in-flight region file not sealed against shrinking",
        ));
    }
    // A hugetlbfs page punched out of the file faults, sealed or not, once the pool is dry.
    if super::memory_faults::on_hugetlbfs(file) != Some(false) {
        return Err(invalid("in-flight region file on hugetlbfs"));
    }
    let end = offset
        .checked_add(size as u64)
        .ok_or_else(|| invalid("in-flight region past the end of its file"))?;
    if file.metadata()?.len() < end {
        return Err(invalid("in-flight region past the end of its file"));
    }
    // SAFETY: maps `size` bytes of a file checked to hold them and sealed against shrinking.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            libc::off_t::try_from(offset).unwrap_or(0),
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mapping = Arc::new(Mapping {
        addr: NonNull::new(addr.cast()).ok_or_else(|| invalid("in-flight region at 0"))?,
        len: size,
    });
    let record_size = queue_record_size(inflight.queue_size);
    Ok((0..usize::from(inflight.num_queues))
        .map(|queue| {
            let record = InflightRecord {
                mapping: mapping.clone(),
                offset: queue * record_size,
                desc_num: inflight.queue_size,
                counter: 0,
            };
            record
                .header_u16(10)
                .store(inflight.queue_size, Ordering::Relaxed);
            record
        })
        .collect())
}

/// What a queue's record says must be done when its ring starts.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The heads that were in flight, oldest first: to be submitted again before new requests.
    pub heads: Vec<u16>,
    /// Where the ring's next available entry is: after every used and every in-flight one.
    pub next_avail: u16,
}

/// One queue's in-flight record, owned by that queue's worker.
pub struct InflightRecord {
    mapping: Arc<Mapping>,
    /// Where this queue's record starts in the mapping.
    offset: usize,
    /// Descriptors the record covers (this process's copy: the frontend may rewrite the header).
    desc_num: u16,
    /// Order in which requests were taken off the avail ring.
    counter: u64,
}

impl InflightRecord {
    fn at<T>(&self, offset: usize) -> &T {
        debug_assert!(self.offset + offset + size_of::<T>() <= self.mapping.len);
        debug_assert!((self.offset + offset).is_multiple_of(align_of::<T>()));
        // SAFETY: every caller's offset lies inside this queue's record (header fields, or a
        // descriptor below `desc_num`), which lies inside the mapping, suitably aligned (records
        // start on 64 bytes, fields on their size); the mapping lives as long as `self`; shared
        // memory is only ever accessed through atomics.
        unsafe {
            &*self
                .mapping
                .addr
                .as_ptr()
                .add(self.offset + offset)
                .cast::<T>()
        }
    }

    fn header_u16(&self, offset: usize) -> &AtomicU16 {
        self.at(offset)
    }

    fn desc(&self, head: u16) -> Option<usize> {
        (head < self.desc_num).then(|| HEADER + DESC_STATE * usize::from(head))
    }

    fn inflight_flag(&self, desc: usize) -> &AtomicU8 {
        self.at(desc)
    }

    fn next(&self, desc: usize) -> &AtomicU16 {
        self.at(desc + 6)
    }

    fn counter(&self, desc: usize) -> &AtomicU64 {
        self.at(desc + 8)
    }

    /// Descriptors the record covers.
    pub fn desc_num(&self) -> u16 {
        self.desc_num
    }

    /// A request was taken off the avail ring: it is in flight from now on.
    pub fn taken(&mut self, head: u16) {
        let Some(desc) = self.desc(head) else {
            return;
        };
        self.counter(desc).store(self.counter, Ordering::Relaxed);
        self.counter += 1;
        self.inflight_flag(desc).store(1, Ordering::Release);
    }

    /// Its used entry is about to be published: it heads the last batch (of one).
    pub fn publishing(&self, head: u16) {
        let Some(desc) = self.desc(head) else {
            return;
        };
        let last = self.header_u16(12);
        self.next(desc)
            .store(last.load(Ordering::Relaxed), Ordering::Relaxed);
        last.store(head, Ordering::Release);
    }

    /// Its used entry was published and the ring's used index is now `used_idx`.
    pub fn published(&self, head: u16, used_idx: u16) {
        self.published_batch([head], used_idx);
    }

    /// The used entries of `heads`, each announced with [`Self::publishing`], were published
    /// together and the ring's used index is now `used_idx`. Every head is cleared before the
    /// index is recorded, so that a death in between is repaired by walking the batch.
    pub fn published_batch(&self, heads: impl IntoIterator<Item = u16>, used_idx: u16) {
        for head in heads {
            if let Some(desc) = self.desc(head) {
                self.inflight_flag(desc).store(0, Ordering::Release);
            }
        }
        self.header_u16(14).store(used_idx, Ordering::Release);
    }

    /// Reads what a backend before this one left in flight, given the ring's used index, and
    /// makes the record consistent with it.
    pub fn recover(&mut self, ring_used_idx: u16) -> Recovery {
        let version = self.header_u16(8);
        if version.load(Ordering::Acquire) != VERSION {
            // A new region: nothing was in flight.
            self.header_u16(14).store(ring_used_idx, Ordering::Relaxed);
            version.store(VERSION, Ordering::Release);
            self.counter = 0;
            return Recovery {
                heads: Vec::new(),
                next_avail: ring_used_idx,
            };
        }
        let recorded_used = self.header_u16(14).load(Ordering::Acquire);
        if recorded_used != ring_used_idx {
            // The process died between publishing the last batch and clearing it: clear it now.
            let batch = ring_used_idx.wrapping_sub(recorded_used).min(self.desc_num);
            let mut head = self.header_u16(12).load(Ordering::Acquire);
            for _ in 0..batch {
                let Some(desc) = self.desc(head) else {
                    break;
                };
                self.inflight_flag(desc).store(0, Ordering::Release);
                head = self.next(desc).load(Ordering::Relaxed);
            }
            self.header_u16(14).store(ring_used_idx, Ordering::Release);
        }
        let mut inflight: Vec<(u64, u16)> = (0..self.desc_num)
            .filter_map(|head| {
                let desc = self.desc(head)?;
                (self.inflight_flag(desc).load(Ordering::Acquire) != 0)
                    .then(|| (self.counter(desc).load(Ordering::Relaxed), head))
            })
            .collect();
        inflight.sort_unstable();
        self.counter = inflight
            .last()
            .map_or(0, |(counter, _)| counter.wrapping_add(1));
        Recovery {
            next_avail: ring_used_idx.wrapping_add(u16::try_from(inflight.len()).unwrap_or(0)),
            heads: inflight.into_iter().map(|(_, head)| head).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(queues: u16, size: u16) -> VhostUserInflight {
        VhostUserInflight {
            mmap_size: 0,
            mmap_offset: 0,
            num_queues: queues,
            queue_size: size,
        }
    }

    fn region(queues: u16, size: u16) -> (File, Vec<InflightRecord>) {
        let (reply, file) = create(&request(queues, size), 4).unwrap();
        let records = map(&reply, &file, 4).unwrap();
        (file, records)
    }

    #[test]
    fn sizes_follow_the_spec_layout() {
        assert_eq!(queue_record_size(1), 64);
        assert_eq!(queue_record_size(256), 16 + 16 * 256 + 48);
        let (reply, _) = create(&request(2, 128), 4).unwrap();
        assert_eq!(reply.mmap_size, 2 * queue_record_size(128) as u64);
        assert!(create(&request(5, 128), 4).is_err());
        assert!(create(&request(0, 128), 4).is_err());
        assert!(create(&request(1, 100), 4).is_err());
        assert!(create(&request(1, 0), 4).is_err());
    }

    #[test]
    fn a_new_region_holds_nothing_in_flight() {
        let (_file, mut records) = region(1, 8);
        let recovery = records[0].recover(5);
        assert_eq!(
            recovery,
            Recovery {
                heads: vec![],
                next_avail: 5
            }
        );
    }

    #[test]
    fn in_flight_heads_come_back_in_the_order_they_were_taken() {
        let (file, mut records) = region(2, 8);
        records[1].recover(0);
        for head in [3, 1, 6, 2] {
            records[1].taken(head);
        }
        // 1 completes out of order.
        records[1].publishing(1);
        records[1].published(1, 1);
        drop(records);
        // The next process maps the same region.
        let mut again = map(&request_of(&file, 2, 8), &file, 4).unwrap();
        let recovery = again[1].recover(1);
        assert_eq!(recovery.heads, vec![3, 6, 2]);
        assert_eq!(recovery.next_avail, 4);
        assert_eq!(again[0].recover(0).heads, Vec::<u16>::new());
    }

    #[test]
    fn a_death_between_publishing_and_clearing_is_repaired() {
        let (file, mut records) = region(1, 8);
        records[0].recover(0);
        records[0].taken(4);
        records[0].taken(5);
        records[0].publishing(5);
        // The used index reached 1, then the process died before `published`.
        drop(records);
        let mut again = map(&request_of(&file, 1, 8), &file, 4).unwrap();
        let recovery = again[0].recover(1);
        assert_eq!(recovery.heads, vec![4]);
        assert_eq!(recovery.next_avail, 2);
    }

    #[test]
    fn a_death_inside_a_published_batch_is_repaired() {
        let (file, mut records) = region(1, 8);
        records[0].recover(0);
        for head in [2, 4, 6, 7] {
            records[0].taken(head);
        }
        // 6, 2 and 4 complete in one batch: announced, the used index moved to 3, then the
        // process died before clearing them.
        for head in [6, 2, 4] {
            records[0].publishing(head);
        }
        drop(records);
        let mut again = map(&request_of(&file, 1, 8), &file, 4).unwrap();
        let recovery = again[0].recover(3);
        assert_eq!(recovery.heads, vec![7]);
        assert_eq!(recovery.next_avail, 4);
        // And a batch cleared in full leaves only what is still in flight.
        again[0].taken(1);
        again[0].publishing(7);
        again[0].publishing(1);
        again[0].published_batch([7, 1], 5);
        drop(again);
        let mut third = map(&request_of(&file, 1, 8), &file, 4).unwrap();
        assert_eq!(third[0].recover(5).heads, Vec::<u16>::new());
    }

    #[test]
    fn a_hostile_region_cannot_reach_past_its_record() {
        let (file, mut records) = region(1, 8);
        records[0].recover(0);
        // The frontend rewrites the header: last_batch_head far outside, desc_num huge.
        records[0].header_u16(12).store(u16::MAX, Ordering::Relaxed);
        records[0].header_u16(10).store(u16::MAX, Ordering::Relaxed);
        records[0].taken(u16::MAX);
        records[0].publishing(9);
        drop(records);
        let mut again = map(&request_of(&file, 1, 8), &file, 4).unwrap();
        assert_eq!(again[0].recover(u16::MAX).heads, Vec::<u16>::new());
    }

    #[test]
    fn unsealed_or_short_files_are_refused() {
        let file = tempfile::tempfile().unwrap();
        file.set_len(4096).unwrap();
        let mut ask = request(1, 8);
        ask.mmap_size = 4096;
        assert!(map(&ask, &file, 4).is_err());
        let (reply, file) = create(&request(1, 8), 4).unwrap();
        let mut past = reply;
        past.mmap_offset = 4096;
        assert!(map(&past, &file, 4).is_err());
        let mut short = reply;
        short.mmap_size = 16;
        assert!(map(&short, &file, 4).is_err());
        let mut more = reply;
        more.num_queues = 2;
        assert!(map(&more, &file, 4).is_err());
    }

    #[test]
    fn an_in_flight_region_on_hugetlbfs_is_refused() {
        // With a huge page in the pool the mapping succeeds (and reserves it); the frontend
        // could then punch it out of the file and drain the pool: the next record write faults.
        const POOL: &str = "/proc/sys/vm/nr_hugepages";
        let was = std::fs::read_to_string(POOL).unwrap_or_default();
        let grown = was.trim() == "0" && std::fs::write(POOL, "1").is_ok();
        let flags = libc::MFD_CLOEXEC | libc::MFD_HUGETLB | libc::MFD_ALLOW_SEALING;
        // SAFETY: a NUL-terminated name; the descriptor is owned by the File below.
        let fd = unsafe { libc::memfd_create(c"vbmq-test-huge".as_ptr(), flags) };
        let refused = (fd >= 0).then(|| {
            // SAFETY: a fresh descriptor nobody else owns.
            let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            file.set_len(2 << 20).unwrap();
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
            // SAFETY: F_ADD_SEALS on our own memfd.
            let sealed = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) };
            assert_eq!(sealed, 0);
            map(&request_of(&file, 1, 8), &file, 4).is_err()
        });
        if grown {
            let _ = std::fs::write(POOL, "0");
        }
        match refused {
            Some(refused) => assert!(refused, "a sealed hugetlb memfd was mapped"),
            None => eprintln!("skipped: no hugetlb memfds on this kernel"),
        }
    }

    fn request_of(file: &File, queues: u16, size: u16) -> VhostUserInflight {
        VhostUserInflight {
            mmap_size: file.metadata().unwrap().len(),
            ..request(queues, size)
        }
    }
}
