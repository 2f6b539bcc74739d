//! How long a snapshot of a quiet disk takes (copy, tmpfs has no reflink) against the host's
//! own copy of the same image, `cp --sparse=always`, to the same storage.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use super::cpus::{CpuPlan, cpu_list, pin_to};
use super::error::{BenchError, Result};
use super::launcher::Launcher;
use super::runner::Settings;
use super::snapshots::SnapshotJob;
use super::stats::Stat;
use super::systems::{DiskSetup, System, WaitMode};

/// Whether `--only TEXT` selects this study.
pub fn selects(text: &str) -> bool {
    "cloud-disks".starts_with(text) || text.contains("snapshot")
}

/// Runs the study (`settings.runs` of each, interleaved); returns its text, or why it was not
/// measured.
pub fn run(launcher: &Launcher, cpus: &CpuPlan, settings: Settings, stop: &AtomicBool) -> String {
    match measure(launcher, cpus, settings, stop) {
        Ok((snapshot, cp)) => describe(launcher.disk_size, &snapshot, &cp, cpus),
        Err(e) => format!("not measured: {e}"),
    }
}

fn measure(
    launcher: &Launcher,
    cpus: &CpuPlan,
    settings: Settings,
    stop: &AtomicBool,
) -> Result<(Vec<f64>, Vec<f64>)> {
    // Event mode: with no frontend its queue thread sleeps, the copy has the backend CPU.
    let system = System::vbmq_on(DiskSetup::Snapshotting, WaitMode::Event);
    let mut running = launcher.launch(system, 1, 0)?;
    let (Some(control), crate::systems::Target::VhostUser(socket)) =
        (running.control(), running.target())
    else {
        return Err(BenchError::Backend("no control socket".into()));
    };
    let job = SnapshotJob {
        vbmq: &launcher.vbmq,
        control,
        socket,
        file: launcher.snapshot_file(),
    };
    let mut copy = launcher.snapshot_file().into_os_string();
    copy.push(".cp");
    let copy = std::path::PathBuf::from(copy);
    let (mut snapshot, mut cp) = (Vec::new(), Vec::new());
    for _ in 0..settings.runs {
        if stop.load(Ordering::Relaxed) {
            return Err(BenchError::Interrupted);
        }
        snapshot.push(job.take()?.1);
        let _ = std::fs::remove_file(&copy);
        cp.push(host_copy(&launcher.disk, &copy, &cpus.backend)?);
        let _ = std::fs::remove_file(&copy);
    }
    drop(job);
    running.stop();
    Ok((snapshot, cp))
}

/// Seconds `cp --sparse=always FROM TO` takes on `cpus`.
fn host_copy(from: &Path, to: &Path, cpus: &[usize]) -> Result<f64> {
    let mut cmd = Command::new("cp");
    cmd.arg("--sparse=always")
        .arg(from)
        .arg(to)
        .stdin(Stdio::null());
    let cpus = cpus.to_vec();
    // SAFETY: sched_setaffinity on a stack-built set is async-signal-safe (see `launcher`).
    unsafe { cmd.pre_exec(move || pin_to(&cpus)) };
    let began = Instant::now();
    let status = cmd.status().map_err(|e| BenchError::io("running cp", e))?;
    if !status.success() {
        return Err(BenchError::Request(format!("cp --sparse=always: {status}")));
    }
    Ok(began.elapsed().as_secs_f64())
}

/// The study's text: each copy's time and GB/s (medians, min-max), and their ratio.
fn describe(bytes: u64, snapshot: &[f64], cp: &[f64], cpus: &CpuPlan) -> String {
    let (Some(s), Some(c)) = (Stat::of(snapshot), Stat::of(cp)) else {
        return "not measured: no copy completed".into();
    };
    let gb_s = |secs: f64| bytes as f64 / secs / 1e9;
    let line = |what: &str, st: Stat| {
        format!(
            "{what}: {:.2} s ({:.2}-{:.2}), {:.2} GB/s\n",
            st.median,
            st.min,
            st.max,
            gb_s(st.median)
        )
    };
    format!(
        "{} MiB disk, no guest I/O, to a file on the same storage, backend CPU {}, medians of {}:\n\
         {}{}snapshot at {:.2}x the speed of cp\n",
        bytes >> 20,
        cpu_list(&cpus.backend),
        snapshot.len(),
        line("vbmq ctl snapshot (copy)", s),
        line("cp --sparse=always", c),
        c.median / s.median
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_states_both_copies_and_their_ratio() {
        let cpus = CpuPlan {
            client: vec![0],
            backend: vec![1],
            shared: false,
        };
        let text = describe(1 << 30, &[0.5, 0.6, 0.4], &[0.25, 0.3, 0.2], &cpus);
        assert!(text.starts_with("1024 MiB disk, no guest I/O"), "{text}");
        assert!(
            text.contains("vbmq ctl snapshot (copy): 0.50 s (0.40-0.60), 2.15 GB/s\n"),
            "{text}"
        );
        assert!(
            text.contains("cp --sparse=always: 0.25 s (0.20-0.30), 4.29 GB/s\n"),
            "{text}"
        );
        assert!(
            text.ends_with("snapshot at 0.50x the speed of cp\n"),
            "{text}"
        );
        assert!(describe(1 << 30, &[], &[0.2], &cpus).starts_with("not measured"));
    }

    #[test]
    fn selected_by_cloud_disks_or_snapshot() {
        assert!(selects("cloud-disks") && selects("cloud") && selects("snapshot"));
        assert!(!selects("matrix") && !selects("cloud-disks/randread"));
    }
}
