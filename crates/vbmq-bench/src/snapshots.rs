//! The side job of the "writes during snapshots" case ([`DiskSetup::Snapshotting`]):
//! `vbmq ctl snapshot` of the disk into a file beside it, back to back from the start of the
//! measured window to its end, each timed; and the figures made of them.
//!
//! [`DiskSetup::Snapshotting`]: crate::systems::DiskSetup::Snapshotting

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;

use super::error::{BenchError, Result};
use super::stat::Stat;

/// vbmq's unit of copy-before-write (`COPY_BLOCK` in `backend/snapshot`): a guest write to a
/// block not yet copied waits for this many bytes to be read and written.
pub const COPY_BLOCK: u64 = 64 << 10;

/// One snapshot taken during a run, times in seconds from the start of the measured window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SnapshotTaken {
    /// When `vbmq ctl` was started (negative: before the window).
    pub began_s: f64,
    /// When it returned.
    pub ended_s: f64,
    /// Bytes in the snapshot (the disk's size), from the reply.
    pub bytes: u64,
    /// The daemon's own duration (`duration_ms`), seconds.
    pub seconds: f64,
    /// The measured window's length, seconds.
    pub window_s: f64,
}

impl SnapshotTaken {
    /// Its copy rate, MB/s (10^6 bytes).
    pub fn mb_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / self.seconds / 1e6
        } else {
            0.0
        }
    }
}

/// The snapshots of a system's runs in one case, summed up.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SnapshotFigures {
    /// Snapshots taken in all runs.
    pub count: usize,
    /// Each one's duration, seconds.
    pub seconds: Stat,
    /// Each one's copy rate, MB/s.
    pub mb_s: Stat,
    /// The share of the measured windows during which a snapshot ran (the gaps are `vbmq ctl`
    /// starting).
    pub covered: f64,
}

impl SnapshotFigures {
    /// The figures of `taken` over `runs` measured windows; `None` if there are none.
    pub fn of(taken: &[SnapshotTaken], runs: usize) -> Option<Self> {
        let window_s = taken.first()?.window_s;
        let seconds = Stat::of(&taken.iter().map(|t| t.seconds).collect::<Vec<_>>())?;
        let mb_s = Stat::of(&taken.iter().map(SnapshotTaken::mb_s).collect::<Vec<_>>())?;
        let inside: f64 = taken
            .iter()
            .map(|t| (t.ended_s.min(window_s) - t.began_s.max(0.0)).max(0.0))
            .sum();
        let total = window_s * runs as f64;
        Some(SnapshotFigures {
            count: taken.len(),
            seconds,
            mb_s,
            covered: if total > 0.0 {
                (inside / total).min(1.0)
            } else {
                0.0
            },
        })
    }

    /// Guest writes a second while every write is a block's first and waits for its copy: the
    /// blocks of [`COPY_BLOCK`] bytes the snapshots copied a second (median).
    pub fn first_write_bound(&self) -> f64 {
        self.mb_s.median * 1e6 / COPY_BLOCK as f64
    }

    /// One line for a goal's note.
    pub fn describe(&self) -> String {
        format!(
            "{} snapshots, each {:.2} s ({:.2}-{:.2}) at {:.0} MB/s ({:.0}-{:.0}), running {:.0}% \
             of the measured time",
            self.count,
            self.seconds.median,
            self.seconds.min,
            self.seconds.max,
            self.mb_s.median,
            self.mb_s.min,
            self.mb_s.max,
            self.covered * 100.0
        )
    }
}

/// What the loop needs to take a snapshot.
pub struct SnapshotJob<'a> {
    /// The vbmq executable (`vbmq ctl`).
    pub vbmq: &'a Path,
    /// The backend's control socket.
    pub control: &'a Path,
    /// The disk's vhost-user socket.
    pub socket: &'a Path,
    /// The snapshot file, removed before each snapshot and at the end.
    pub file: PathBuf,
}

impl SnapshotJob<'_> {
    /// Waits for `start`, then takes snapshots one after the other until one ends after `end`
    /// (or `stop` is raised); returns them, times from `start`.
    pub fn run(
        &self,
        start: Instant,
        end: Instant,
        stop: &AtomicBool,
    ) -> Result<Vec<SnapshotTaken>> {
        std::thread::sleep(start.saturating_duration_since(Instant::now()));
        let since = |t: Instant| {
            if t >= start {
                (t - start).as_secs_f64()
            } else {
                -(start - t).as_secs_f64()
            }
        };
        let window_s = (end - start).as_secs_f64();
        let mut taken = Vec::new();
        while Instant::now() < end && !stop.load(Ordering::Relaxed) {
            let began = Instant::now();
            let (bytes, seconds) = self.take()?;
            taken.push(SnapshotTaken {
                began_s: since(began),
                ended_s: since(Instant::now()),
                bytes,
                seconds,
                window_s,
            });
        }
        let _ = std::fs::remove_file(&self.file);
        Ok(taken)
    }

    /// Takes one snapshot; returns its bytes and the daemon's seconds.
    pub fn take(&self) -> Result<(u64, f64)> {
        let _ = std::fs::remove_file(&self.file);
        let out = Command::new(self.vbmq)
            .arg("ctl")
            .arg("--control")
            .arg(self.control)
            .arg("snapshot")
            .arg(self.socket)
            .arg(&self.file)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| BenchError::io("running vbmq ctl snapshot", e))?;
        let reply = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(BenchError::Request(format!(
                "vbmq ctl snapshot: {} {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        parse_reply(&reply).ok_or_else(|| {
            BenchError::Request(format!("vbmq ctl snapshot answered {}", reply.trim()))
        })
    }
}

/// Bytes and seconds of a `snapshot` reply (`{"method", "bytes", "duration_ms", ...}`).
pub fn parse_reply(reply: &str) -> Option<(u64, f64)> {
    let v: serde_json::Value = serde_json::from_str(reply.trim()).ok()?;
    let bytes = v.get("bytes")?.as_u64()?;
    let ms = v.get("duration_ms")?.as_f64()?;
    Some((bytes, ms / 1e3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_reply_of_vbmq_ctl_snapshot() {
        let reply = r#"{"method": "copy", "bytes": 1073741824, "duration_ms": 512, "copied_before_write": 900}
"#;
        assert_eq!(parse_reply(reply), Some((1 << 30, 0.512)));
        assert_eq!(parse_reply(r#"{"method": "copy"}"#), None);
        assert_eq!(parse_reply("vbmq: no such disk"), None);
    }

    #[test]
    fn figures_count_only_the_time_inside_the_windows() {
        let t = |began_s, ended_s, seconds| SnapshotTaken {
            began_s,
            ended_s,
            bytes: 1_000_000_000,
            seconds,
            window_s: 1.0,
        };
        // Two windows of 1 s: the first covered from -0.1 to 0.5 and 0.52 to 1.2 (0.98 s
        // inside), the second from 0.0 to 0.4 only.
        let taken = [t(-0.1, 0.5, 0.5), t(0.52, 1.2, 0.64), t(0.0, 0.4, 0.4)];
        let f = SnapshotFigures::of(&taken, 2).unwrap();
        assert_eq!(f.count, 3);
        assert!((f.covered - 1.38 / 2.0).abs() < 1e-9, "{}", f.covered);
        assert_eq!(f.seconds.median, 0.5);
        assert_eq!(
            (f.mb_s.min, f.mb_s.median, f.mb_s.max),
            (1562.5, 2000.0, 2500.0)
        );
        assert!(
            f.describe()
                .starts_with("3 snapshots, each 0.50 s (0.40-0.64) at 2000 MB/s")
        );
        assert_eq!(SnapshotFigures::of(&[], 2), None);
    }
}
