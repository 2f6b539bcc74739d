//! What the figures came from: the machine, its kernel, the versions, the time.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The machine a report was measured on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus_online: usize,
    /// Kernel release.
    pub kernel: String,
    /// Total memory in GiB.
    pub memory_gib: f64,
    /// `qemu-storage-daemon --version`, first line, if installed.
    pub qsd_version: Option<String>,
    /// vbmq's version.
    pub vbmq_version: String,
}

impl Machine {
    /// Reads the facts of this machine.
    pub fn detect(qsd: Option<&Path>) -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let cpus_online = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let memory_gib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let kib = m.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
                kib.trim().trim_end_matches("kB").trim().parse::<f64>().ok()
            })
            .map(|kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0)
            .unwrap_or(0.0);
        let qsd_version = qsd.and_then(|q| {
            let out = Command::new(q).arg("--version").output().ok()?;
            let text = String::from_utf8_lossy(&out.stdout);
            Some(text.lines().next()?.trim().to_string())
        });
        Machine {
            cpu_model,
            cpus_online,
            kernel,
            memory_gib,
            qsd_version,
            vbmq_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

/// The 1-minute load average: above the CPU count, other work shared the CPUs with the runs.
pub fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The current UTC time as `(2026-11-22T01:02:03Z, 2026-11-22-010203)`.
pub fn utc_now() -> (String, String) {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

fn format_utc(secs: u64) -> (String, String) {
    let (y, m, d) = civil_from_days((secs / 86_400).cast_signed());
    let t = secs % 86_400;
    let (hh, mm, ss) = (t / 3600, t / 60 % 60, t % 60);
    (
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
        format!("{y:04}-{m:02}-{d:02}-{hh:02}{mm:02}{ss:02}"),
    )
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's algorithm.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc(0).0, "1970-01-01T00:00:00Z");
        // 2024-02-29 12:34:56 UTC, a leap day.
        assert_eq!(format_utc(1_709_210_096).0, "2024-02-29T12:34:56Z");
        assert_eq!(format_utc(1_709_210_096).1, "2024-02-29-123456");
    }

    #[test]
    fn detects_this_machine() {
        let m = Machine::detect(None);
        assert!(m.cpus_online >= 1);
        assert!(m.memory_gib > 0.0);
        assert!(m.qsd_version.is_none());
        assert!(load_average().is_some_and(|l| l >= 0.0));
    }
}
