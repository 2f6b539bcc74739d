//! The load generator: libblkio, the userspace virtio-blk driver QEMU itself uses, so a
//! vhost-user target is driven exactly as a guest driver drives it, and its io_uring driver on
//! the file is "bare metal".

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use blkio::{Blkio, Blkioq, Completion, ReqFlags};

use super::cpus::{CpuPlan, pin_to};
use super::error::{BenchError, Result};
use super::histogram::Histogram;
pub use super::load::{LoadResult, LoadSpec};
use super::load::{Offsets, cpu_over_window, join_jobs};
use super::rng::Rng;
use super::systems::Target;
use super::workloads::{ClientMode, Op, Workload};

/// A request that takes longer than this is a hung backend, not a slow one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a just-started backend may refuse connections.
const CONNECT_RETRY: Duration = Duration::from_secs(2);

/// Runs `spec` against `target` with the client threads on `cpus.client`.
pub fn run_load(
    target: &Target,
    spec: &LoadSpec,
    cpus: &CpuPlan,
    backend_pid: Option<u32>,
    stop: &AtomicBool,
) -> Result<LoadResult> {
    if let Target::FileSync { path, direct } = target {
        return super::sync_client::run_load(path, *direct, spec, cpus, stop);
    }
    let (mut blkio, queues) = open(target, spec)?;
    let capacity = blkio
        .get_u64("capacity")
        .map_err(|e| BenchError::blkio("reading capacity", e))?;
    let bs = spec.workload.block_size as usize;
    let per_job = bs * spec.workload.iodepth as usize;
    let align = blkio
        .get_u64("mem-region-alignment")
        .map_err(|e| BenchError::blkio("reading mem-region-alignment", e))?
        .max(1) as usize;
    let len = (per_job * spec.jobs).div_ceil(align) * align;
    let region = blkio
        .alloc_mem_region(len)
        .map_err(|e| BenchError::blkio("allocating buffers", e))?;
    blkio
        .map_mem_region(&region)
        .map_err(|e| BenchError::blkio("mapping buffers", e))?;
    // SAFETY: the region is a fresh read-write shared mapping of `region.len` bytes owned by
    // `blkio`, alive until it drops at the end of this function; nothing else touches it yet.
    let buffers = unsafe { std::slice::from_raw_parts_mut(region.addr as *mut u8, region.len) };
    Rng::new(0xb10c).fill(buffers);

    let start = Instant::now() + spec.warmup;
    let end = start + spec.measure;
    let (jobs, window) = thread::scope(|scope| {
        let handles: Vec<_> = queues
            .into_iter()
            .enumerate()
            .map(|(index, queue)| {
                let job = Job {
                    index,
                    jobs: spec.jobs,
                    workload: spec.workload,
                    buffers: region.addr + index * per_job,
                    capacity,
                    start,
                    end,
                };
                let cpu = cpus.client_cpu(index);
                scope.spawn(move || {
                    pin_to(&[cpu])
                        .map_err(|e| BenchError::io(format!("pinning to CPU {cpu}"), e))?;
                    job.run(queue, stop)
                })
            })
            .collect();
        let window = cpu_over_window(backend_pid, cpus, start, end);
        let jobs = join_jobs(handles);
        (jobs, window)
    });
    drop(blkio);

    if stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    let mut latency = Histogram::default();
    let mut ios = 0;
    for job in jobs {
        let job = job?;
        latency.merge(&job.latency);
        ios += job.ios;
    }
    Ok(LoadResult {
        ios,
        bytes: ios * spec.workload.block_size as u64,
        seconds: spec.measure.as_secs_f64(),
        latency,
        backend_cpu_seconds: window.backend,
        client_cpu_seconds: window.client,
        others_cpu_seconds: window.others,
    })
}

/// Connects and starts libblkio with one queue per job, retrying while a fresh backend still
/// refuses connections.
fn open(target: &Target, spec: &LoadSpec) -> Result<(Blkio, Vec<Blkioq>)> {
    let (driver, path, vhost, direct) = match target {
        Target::File { path, direct } => ("io_uring", path.as_path(), false, *direct),
        Target::FileSync { .. } => {
            return Err(BenchError::Usage(
                "a psync target has no libblkio driver".into(),
            ));
        }
        Target::VhostUser(p) => ("virtio-blk-vhost-user", p.as_path(), true, false),
    };
    let deadline = Instant::now() + CONNECT_RETRY;
    let mut blkio = loop {
        match connect(driver, path, vhost, direct) {
            Ok(b) => break b,
            Err(_) if vhost && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(10))
            }
            Err(e) => return Err(e),
        }
    };
    let jobs = i32::try_from(spec.jobs).map_err(|_| BenchError::Usage("too many jobs".into()))?;
    // Poll queues spin on the used ring with notifications off. The io_uring driver's poll
    // queues need IOPOLL-capable devices, which tmpfs is not: bare metal completes inline anyway.
    let poll = vhost && spec.client == ClientMode::Polling;
    let set = |b: &mut Blkio, name: &str, v: i32| {
        b.set_i32(name, v)
            .map_err(|e| BenchError::blkio(format!("setting {name}={v}"), e))
    };
    if poll {
        set(&mut blkio, "num-queues", 0)?;
        set(&mut blkio, "num-poll-queues", jobs)?;
    } else {
        set(&mut blkio, "num-queues", jobs)?;
    }
    let started = blkio
        .start()
        .map_err(|e| BenchError::blkio(format!("starting {driver}"), e))?;
    let queues = if poll {
        started.poll_queues
    } else {
        started.queues
    };
    Ok((blkio, queues))
}

fn connect(driver: &str, path: &Path, vhost: bool, direct: bool) -> Result<Blkio> {
    let context = |what: &str| format!("{what} ({driver} {})", path.display());
    let mut blkio = Blkio::new(driver).map_err(|e| BenchError::blkio(context("creating"), e))?;
    let path_str = path
        .to_str()
        .ok_or_else(|| BenchError::Usage(format!("path is not UTF-8: {}", path.display())))?;
    blkio
        .set_str("path", path_str)
        .map_err(|e| BenchError::blkio(context("setting path"), e))?;
    if !vhost {
        blkio
            .set_bool("direct", direct)
            .map_err(|e| BenchError::blkio(context("setting direct"), e))?;
    }
    blkio
        .connect()
        .map_err(|e| BenchError::blkio(context("connecting"), e))?;
    Ok(blkio)
}

/// One client thread's share of a run.
struct Job {
    index: usize,
    jobs: usize,
    workload: Workload,
    /// Address of this job's `iodepth` buffers of `block_size` bytes each.
    buffers: usize,
    capacity: u64,
    start: Instant,
    end: Instant,
}

struct JobResult {
    latency: Histogram,
    ios: u64,
}

impl Job {
    /// Keeps `iodepth` requests in flight until `end`, then drains them.
    fn run(self, mut queue: Blkioq, stop: &AtomicBool) -> Result<JobResult> {
        let depth = self.workload.iodepth as usize;
        let mut offsets = Offsets::for_job(self.index, self.jobs, self.workload, self.capacity);
        let now = Instant::now();
        let mut issued = vec![now; depth];
        let mut started_at: Vec<u64> = (0..depth)
            .map(|slot| self.submit(&mut queue, slot, &mut offsets))
            .collect();
        let mut completions: Vec<MaybeUninit<Completion>> =
            (0..depth).map(|_| MaybeUninit::uninit()).collect();
        let mut latency = Histogram::default();
        let mut ios = 0;
        let mut in_flight = depth;
        while in_flight > 0 {
            let mut timeout = REQUEST_TIMEOUT;
            let n = queue
                .do_io(&mut completions, 1, Some(&mut timeout), None)
                .map_err(|e| BenchError::blkio("waiting for completions", e))?;
            let now = Instant::now();
            let more = now < self.end && !stop.load(Ordering::Relaxed);
            let counted = now >= self.start && now <= self.end;
            for c in &completions[..n] {
                // SAFETY: do_io initialised the first `n` entries.
                let c = unsafe { c.assume_init_ref() };
                let slot = c.user_data;
                if slot >= depth {
                    return Err(BenchError::Request(format!(
                        "unknown request {slot} completed"
                    )));
                }
                if c.ret != 0 {
                    return Err(BenchError::Request(format!(
                        "{:?} of {} bytes at {} failed: errno {}",
                        self.workload.op, self.workload.block_size, started_at[slot], -c.ret
                    )));
                }
                if counted {
                    latency.record(now - issued[slot]);
                    ios += 1;
                }
                if more {
                    issued[slot] = Instant::now();
                    started_at[slot] = self.submit(&mut queue, slot, &mut offsets);
                } else {
                    in_flight -= 1;
                }
            }
        }
        Ok(JobResult { latency, ios })
    }

    /// Queues request `slot` (submitted by the next `do_io`); returns its offset.
    fn submit(&self, queue: &mut Blkioq, slot: usize, offsets: &mut Offsets) -> u64 {
        let bs = self.workload.block_size as usize;
        let offset = offsets.next();
        let buf = (self.buffers + slot * bs) as *mut u8;
        match self.workload.op {
            Op::Read => queue.read(offset, buf, bs, slot, ReqFlags::empty()),
            Op::Write => queue.write(offset, buf, bs, slot, ReqFlags::empty()),
        }
        offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(index: usize, jobs: usize, workload: Workload) -> Job {
        let now = Instant::now();
        Job {
            index,
            jobs,
            workload,
            buffers: 0,
            capacity: 1 << 20,
            start: now,
            end: now,
        }
    }

    #[test]
    fn random_offsets_are_aligned_and_in_range() {
        let j = job(1, 2, Workload::randread(1));
        let mut o = Offsets::for_job(j.index, j.jobs, j.workload, j.capacity);
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..1000 {
            let off = o.next();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= 1 << 20);
            distinct.insert(off);
        }
        // Random over the whole disk, not the job's half.
        assert!(distinct.iter().any(|&o| o < 1 << 19));
        assert!(distinct.len() > 100);
    }

    #[test]
    fn sequential_offsets_walk_own_slice_and_wrap() {
        // 1 MiB / 128 KiB = 8 blocks; job 1 of 2 owns blocks 4..8.
        let j = job(1, 2, Workload::seqread(1));
        let mut o = Offsets::for_job(j.index, j.jobs, j.workload, j.capacity);
        let got: Vec<u64> = (0..5).map(|_| o.next() >> 17).collect();
        assert_eq!(got, [4, 5, 6, 7, 4]);
    }
}
