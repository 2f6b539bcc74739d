//! The load generator: libblkio, the userspace virtio-blk driver QEMU itself uses, so a
//! vhost-user target is driven exactly as a guest driver drives it, and its io_uring driver on
//! the file is "bare metal".

use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use blkio::{Blkio, Blkioq, Completion, ReqFlags};

use super::cpus::{CpuPlan, cpus_busy_seconds, pin_to, process_cpu_seconds};
use super::error::{BenchError, Result};
use super::histogram::Histogram;
use super::rng::Rng;
use super::systems::Target;
use super::workloads::{ClientMode, Op, Pattern, Workload};

/// A request that takes longer than this is a hung backend, not a slow one.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a just-started backend may refuse connections.
const CONNECT_RETRY: Duration = Duration::from_secs(2);

/// One measured run.
#[derive(Clone, Copy, Debug)]
pub struct LoadSpec {
    /// What each job does.
    pub workload: Workload,
    /// Polling or interrupt-driven completion.
    pub client: ClientMode,
    /// Client threads, one queue each.
    pub jobs: usize,
    /// Time before measuring starts (caches, ring state, backend mode settle).
    pub warmup: Duration,
    /// Time measured.
    pub measure: Duration,
}

/// What a run measured. Only completions inside the measured window count.
#[derive(Debug)]
pub struct LoadResult {
    /// Requests completed.
    pub ios: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Length of the measured window in seconds.
    pub seconds: f64,
    /// Submission-to-completion latency of every counted request.
    pub latency: Histogram,
    /// CPU seconds the backend process used in the window, if there is a backend process.
    pub backend_cpu_seconds: Option<f64>,
    /// CPU seconds this (client) process used in the window.
    pub client_cpu_seconds: Option<f64>,
    /// CPU seconds other processes took on the client's and backend's CPUs in the window.
    pub others_cpu_seconds: Option<f64>,
}

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

/// The client threads' results; a thread that panicked is a failed request.
pub(super) fn join_jobs<T>(
    handles: Vec<thread::ScopedJoinHandle<'_, Result<T>>>,
) -> Vec<Result<T>> {
    handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(BenchError::Request("client thread panicked".into())))
        })
        .collect()
}

/// CPU seconds spent in a run's measured window.
pub(super) struct WindowCpu {
    pub(super) backend: Option<f64>,
    pub(super) client: Option<f64>,
    /// By everything else on the client's and backend's CPUs: the interference of other work.
    pub(super) others: Option<f64>,
}

/// Samples CPU use at `start` and at `end`.
pub(super) fn cpu_over_window(
    backend: Option<u32>,
    cpus: &CpuPlan,
    start: Instant,
    end: Instant,
) -> WindowCpu {
    let me = std::process::id();
    let mut plan_cpus = cpus.client.clone();
    if !cpus.shared {
        plan_cpus.extend(&cpus.backend);
    }
    let read = |pid: Option<u32>| pid.and_then(|p| process_cpu_seconds(p).ok());
    let sample = || {
        let busy = cpus_busy_seconds(&plan_cpus).ok();
        (read(backend), read(Some(me)), busy)
    };
    thread::sleep(start.saturating_duration_since(Instant::now()));
    let (b0, c0, all0) = sample();
    thread::sleep(end.saturating_duration_since(Instant::now()));
    let (b1, c1, all1) = sample();
    let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    let (backend, client, all) = (diff(b0, b1), diff(c0, c1), diff(all0, all1));
    let ours = client.map(|c| c + backend.unwrap_or(0.0));
    WindowCpu {
        backend,
        client,
        others: diff(ours, all).map(|o| o.max(0.0)),
    }
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
        let mut offsets = Offsets::new(&self);
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

/// Offsets for one job: random over the whole disk, or sequential over the job's own slice.
pub(super) struct Offsets {
    pattern: Pattern,
    block_size: u64,
    rng: Rng,
    first: u64,
    end: u64,
    next: u64,
}

impl Offsets {
    fn new(job: &Job) -> Self {
        Self::for_job(job.index, job.jobs, job.workload, job.capacity)
    }

    /// The offsets of job `index` of `jobs` on a disk of `capacity` bytes.
    pub(super) fn for_job(index: usize, jobs: usize, workload: Workload, capacity: u64) -> Self {
        let block_size = u64::from(workload.block_size);
        let blocks = (capacity / block_size).max(1);
        let (first, end) = match workload.pattern {
            Pattern::Random => (0, blocks),
            Pattern::Sequential => {
                let (index, jobs) = (index as u64, jobs.max(1) as u64);
                let first = blocks * index / jobs;
                (first, (blocks * (index + 1) / jobs).max(first + 1))
            }
        };
        Offsets {
            pattern: workload.pattern,
            block_size,
            rng: Rng::new(0x1234_5678 + index as u64),
            first,
            end,
            next: first,
        }
    }

    pub(super) fn next(&mut self) -> u64 {
        let block = match self.pattern {
            Pattern::Random => self.first + self.rng.below(self.end - self.first),
            Pattern::Sequential => {
                let b = self.next;
                self.next = if b + 1 >= self.end { self.first } else { b + 1 };
                b
            }
        };
        block * self.block_size
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
        let mut o = Offsets::new(&j);
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
        let mut o = Offsets::new(&j);
        let got: Vec<u64> = (0..5).map(|_| o.next() >> 17).collect();
        assert_eq!(got, [4, 5, 6, 7, 4]);
    }
}
