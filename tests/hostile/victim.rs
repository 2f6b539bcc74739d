//! The bystander: a second disk of the same process, driven by libblkio's vhost-user driver
//! (an independent virtio implementation), which must read back what it wrote after every case.

use std::mem::MaybeUninit;
use std::time::Duration;

use blkio::{Blkio, Blkioq, Completion, MemoryRegion, ReqFlags};

const BLOCK: usize = 4096;

pub struct Victim {
    _blkio: Blkio,
    queue: Blkioq,
    region: MemoryRegion,
    model: Vec<u8>,
    round: u64,
}

impl Victim {
    pub fn connect(socket: &std::path::Path, initial: Vec<u8>) -> Self {
        let mut blkio = Blkio::new("virtio-blk-vhost-user").unwrap();
        blkio.set_str("path", socket.to_str().unwrap()).unwrap();
        blkio.connect().unwrap();
        blkio.set_i32("num-queues", 1).unwrap();
        let mut started = blkio.start().unwrap();
        let queue = started.queues.remove(0);
        let region = blkio.alloc_mem_region(2 * BLOCK).unwrap();
        blkio.map_mem_region(&region).unwrap();
        Victim {
            _blkio: blkio,
            queue,
            region,
            model: initial,
            round: 0,
        }
    }

    fn wait_one(&mut self) -> Result<(), String> {
        let mut done = [MaybeUninit::<Completion>::uninit()];
        let mut timeout = Duration::from_secs(10);
        let n = self
            .queue
            .do_io(&mut done, 1, Some(&mut timeout), None)
            .map_err(|e| format!("victim do_io: {e}"))?;
        if n != 1 {
            return Err("victim request timed out".into());
        }
        // SAFETY: do_io initialised the first `n` completions.
        let completion = unsafe { done[0].assume_init_read() };
        if completion.ret != 0 {
            return Err(format!("victim request failed: {}", completion.ret));
        }
        Ok(())
    }

    /// Writes a new block, reads back it and another block, and compares both with the model.
    pub fn check(&mut self) -> Result<(), String> {
        self.round += 1;
        let blocks = self.model.len() / BLOCK;
        let write_at = (self.round as usize * 7) % blocks * BLOCK;
        let read_at = (self.round as usize * 13 + 5) % blocks * BLOCK;
        let data: Vec<u8> = (0..BLOCK)
            .map(|i| (i as u64 ^ self.round.wrapping_mul(31)) as u8)
            .collect();
        let buf = self.region.addr as *mut u8;
        // SAFETY: the region is 2 * BLOCK bytes of our own mapping, not in use by a request.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, BLOCK) };
        self.queue
            .write(write_at as u64, buf, BLOCK, 0, ReqFlags::empty());
        self.wait_one()?;
        self.model[write_at..write_at + BLOCK].copy_from_slice(&data);
        for at in [write_at, read_at] {
            // SAFETY: as above, the second half of the region.
            let read_buf = unsafe { buf.add(BLOCK) };
            self.queue
                .read(at as u64, read_buf, BLOCK, 0, ReqFlags::empty());
            self.wait_one()?;
            // SAFETY: the request completed; BLOCK initialised bytes at read_buf.
            let got = unsafe { std::slice::from_raw_parts(read_buf, BLOCK) };
            if got != &self.model[at..at + BLOCK] {
                return Err(format!("victim disk returned wrong data at offset {at}"));
            }
        }
        Ok(())
    }
}
