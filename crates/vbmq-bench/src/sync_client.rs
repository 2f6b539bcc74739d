//! Bare metal the way a host program reads a fast device it owns: synchronous `pread`/`pwrite`
//! on the file, `O_DIRECT` or through the page cache, one request at a time per client thread
//! (fio's `psync` engine). On tmpfs, and on the page cache, this beats io_uring, which hands
//! every such read to a kernel worker. A synchronous engine has one request in flight per thread
//! whatever the workload's depth says, as in fio.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

use super::cpus::{CpuPlan, pin_to};
use super::error::{BenchError, Result};
use super::histogram::Histogram;
use super::load::{LoadResult, LoadSpec, Offsets, cpu_over_window, join_jobs};
use super::workloads::Op;

/// A block-aligned buffer for `O_DIRECT`.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Result<Self> {
        let layout = std::alloc::Layout::from_size_align(len.max(4096), 4096)
            .map_err(|e| BenchError::Usage(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: a non-zero size layout.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(BenchError::Usage("out of memory".into()));
        }
        Ok(Aligned { ptr, layout })
    }

    fn slice(&mut self, len: usize) -> &mut [u8] {
        // SAFETY: the allocation holds at least `len` bytes and is owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, len.min(self.layout.size())) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Runs `spec` with one synchronous job per client thread on the file at `path`, `O_DIRECT` if
/// `direct`.
pub fn run_load(
    path: &Path,
    direct: bool,
    spec: &LoadSpec,
    cpus: &CpuPlan,
    stop: &AtomicBool,
) -> Result<LoadResult> {
    let capacity = std::fs::metadata(path)
        .map_err(|e| BenchError::io(format!("reading {}", path.display()), e))?
        .len();
    let start = Instant::now() + spec.warmup;
    let end = start + spec.measure;
    let (jobs, window) = thread::scope(|scope| {
        let handles: Vec<_> = (0..spec.jobs)
            .map(|index| {
                let cpu = cpus.client_cpu(index);
                scope.spawn(move || -> Result<(Histogram, u64)> {
                    pin_to(&[cpu])
                        .map_err(|e| BenchError::io(format!("pinning to CPU {cpu}"), e))?;
                    let write = spec.workload.op == Op::Write;
                    let file = OpenOptions::new()
                        .read(true)
                        .write(write)
                        .custom_flags(if direct { libc::O_DIRECT } else { 0 })
                        .open(path)
                        .map_err(|e| BenchError::io(format!("opening {}", path.display()), e))?;
                    let bs = spec.workload.block_size as usize;
                    let mut buffer = Aligned::new(bs)?;
                    super::rng::Rng::new(0xb10c + index as u64).fill(buffer.slice(bs));
                    let mut offsets = Offsets::for_job(index, spec.jobs, spec.workload, capacity);
                    let mut latency = Histogram::default();
                    let mut ios = 0u64;
                    loop {
                        let issued = Instant::now();
                        if issued >= end || stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let offset = offsets.next();
                        let buf = buffer.slice(bs);
                        let done = if write {
                            file.write_at(buf, offset)
                        } else {
                            file.read_at(buf, offset)
                        };
                        match done {
                            Ok(n) if n == bs => {}
                            other => {
                                return Err(BenchError::Request(format!(
                                    "{:?} of {bs} bytes at {offset}: {other:?}",
                                    spec.workload.op
                                )));
                            }
                        }
                        let now = Instant::now();
                        if issued >= start && now <= end {
                            latency.record(now - issued);
                            ios += 1;
                        }
                    }
                    Ok((latency, ios))
                })
            })
            .collect();
        let window = cpu_over_window(None, cpus, start, end);
        let jobs = join_jobs(handles);
        (jobs, window)
    });
    if stop.load(Ordering::Relaxed) {
        return Err(BenchError::Interrupted);
    }
    let mut latency = Histogram::default();
    let mut ios = 0;
    for job in jobs {
        let (h, n) = job?;
        latency.merge(&h);
        ios += n;
    }
    Ok(LoadResult {
        ios,
        bytes: ios * u64::from(spec.workload.block_size),
        seconds: spec.measure.as_secs_f64(),
        latency,
        backend_cpu_seconds: window.backend,
        client_cpu_seconds: window.client,
        others_cpu_seconds: window.others,
    })
}
