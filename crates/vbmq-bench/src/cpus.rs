//! Which CPUs the client and the backend run on, and how much CPU a process used.
//!
//! A vCPU and a host I/O thread sit on different cores in a real host, so the load generator and
//! the backend under test are pinned to disjoint CPU sets.

use std::fmt;
use std::fs;
use std::io;

use serde::Serialize;

use super::error::{BenchError, Result};

/// The CPUs given to the load generator and to the backend under test.
#[derive(Clone, Debug, Serialize)]
pub struct CpuPlan {
    /// CPUs for the client (libblkio) threads.
    pub client: Vec<usize>,
    /// CPUs for the backend process (vbmq, qemu-storage-daemon).
    pub backend: Vec<usize>,
    /// True when there was one CPU only, so both share it.
    pub shared: bool,
}

impl CpuPlan {
    /// Splits the CPUs this process may run on: the first half to the client, the rest to the
    /// backend. With one CPU both share it.
    pub fn detect() -> Result<Self> {
        let cpus = allowed_cpus()?;
        Ok(Self::split(&cpus))
    }

    fn split(cpus: &[usize]) -> Self {
        if cpus.len() < 2 {
            return CpuPlan {
                client: cpus.to_vec(),
                backend: cpus.to_vec(),
                shared: true,
            };
        }
        let half = cpus.len().div_ceil(2);
        CpuPlan {
            client: cpus[..half].to_vec(),
            backend: cpus[half..].to_vec(),
            shared: false,
        }
    }

    /// The client CPU for job `index` (round robin).
    pub fn client_cpu(&self, index: usize) -> usize {
        self.client[index % self.client.len()]
    }

    /// Number of CPUs the plan covers.
    pub fn total(&self) -> usize {
        if self.shared {
            self.client.len()
        } else {
            self.client.len() + self.backend.len()
        }
    }
}

impl fmt::Display for CpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "client on CPU {}, backend on CPU {}",
            cpu_list(&self.client),
            cpu_list(&self.backend)
        )?;
        if self.shared {
            write!(f, " (one CPU only: they share it, figures understate both)")?;
        }
        Ok(())
    }
}

/// Formats CPUs as `0,1,2`.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(BenchError::io(
            "sched_getaffinity",
            io::Error::last_os_error(),
        ));
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: CPU_ISSET only reads the set; `cpu` is below the set's capacity.
    let cpus: Vec<usize> = (0..max)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    if cpus.is_empty() {
        return Err(BenchError::Usage("no CPU is allowed to run on".into()));
    }
    Ok(cpus)
}

/// Pins the calling thread (or, with `pid` 0 in a forked child, the whole new process) to `cpus`.
///
/// Async-signal-safe: it only builds a set on the stack and makes one system call, so it may run
/// between fork and exec.
pub fn pin_to(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: CPU_SET writes inside `set`; it ignores CPUs beyond the set's capacity.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time (user + system, all threads, including exited ones) of process `pid`, in seconds.
pub fn process_cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_stat_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/PID/stat"))?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

/// Time `cpus` spent running anything (user, nice, system, irq, softirq), summed, in seconds.
pub fn cpus_busy_seconds(cpus: &[usize]) -> io::Result<f64> {
    let stat = fs::read_to_string("/proc/stat")?;
    let ticks = parse_busy_ticks(&stat, cpus)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc/stat"))?;
    Ok(ticks as f64 / clock_ticks_per_second())
}

/// Sums the busy fields of the `cpuN` lines of `/proc/stat` for N in `cpus`; `None` if one is
/// missing or malformed.
fn parse_busy_ticks(stat: &str, cpus: &[usize]) -> Option<u64> {
    let mut total = 0;
    for &cpu in cpus {
        let prefix = format!("cpu{cpu} ");
        let line = stat.lines().find(|l| l.starts_with(&prefix))?;
        let fields: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        // user nice system idle iowait irq softirq ...: everything but idle and iowait.
        let busy = [0, 1, 2, 5, 6].iter().map(|&i| fields.get(i).copied());
        total += busy.sum::<Option<u64>>()?;
    }
    Some(total)
}

/// utime + stime (fields 14 and 15) from a `/proc/PID/stat` line. The command name (field 2) may
/// hold spaces and parentheses, so parsing starts after its last `)`.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    // After the name come state (3) ... utime (14), stime (15): skip fields 3..=13.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 { hz as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_two_cpus_one_each() {
        let plan = CpuPlan::split(&[0, 1]);
        assert_eq!(plan.client, vec![0]);
        assert_eq!(plan.backend, vec![1]);
        assert!(!plan.shared);
        assert_eq!(plan.total(), 2);
    }

    #[test]
    fn one_cpu_is_shared() {
        let plan = CpuPlan::split(&[3]);
        assert_eq!(plan.client, vec![3]);
        assert_eq!(plan.backend, vec![3]);
        assert!(plan.shared);
        assert_eq!(plan.total(), 1);
    }

    #[test]
    fn odd_count_gives_client_the_extra_cpu() {
        let plan = CpuPlan::split(&[0, 1, 2]);
        assert_eq!(plan.client, vec![0, 1]);
        assert_eq!(plan.backend, vec![2]);
        assert_eq!(plan.client_cpu(3), 1);
    }

    #[test]
    fn parses_stat_with_awkward_name() {
        let line = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0";
        assert_eq!(parse_stat_ticks(line), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn sums_busy_ticks_of_chosen_cpus() {
        let stat = "cpu  9 9 9 9 9 9 9 0 0 0\n\
                    cpu0 1 2 3 100 50 4 5 6 0 0\n\
                    cpu1 10 0 10 100 0 0 0 0 0 0\n\
                    cpu10 1000 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_busy_ticks(stat, &[0]), Some(15));
        assert_eq!(parse_busy_ticks(stat, &[1]), Some(20));
        assert_eq!(parse_busy_ticks(stat, &[0, 1]), Some(35));
        assert_eq!(parse_busy_ticks(stat, &[2]), None);
        assert!(cpus_busy_seconds(&CpuPlan::detect().unwrap().client).is_ok());
    }

    #[test]
    fn reads_own_cpu_time_and_rejects_missing_process() {
        assert!(process_cpu_seconds(std::process::id()).is_ok());
        // PIDs never reach u32::MAX (pid_max is at most 2^22).
        assert!(process_cpu_seconds(u32::MAX).is_err());
    }
}
