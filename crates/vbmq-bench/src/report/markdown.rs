//! report.md: what was measured, on what, the goals, then one section per experiment.

use std::fmt::Write;

use crate::cache_study;
use crate::cpus::cpu_list;
use crate::workloads::Experiment;

use super::Report;
use super::figures::Figure;
use super::table::{case_markdown, case_title, goals_markdown};

/// The whole report.md.
pub fn render(report: &Report, figures: &[Figure]) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# vbmq bench\n");
    let _ = writeln!(
        md,
        "Measured {} with `{}`{}.\n",
        report.date_utc,
        report.command,
        if report.complete {
            ""
        } else {
            " (interrupted: partial results)"
        }
    );
    md.push_str(&setup(report));
    md.push_str("\n## Goals\n\n");
    md.push_str(&goals_markdown(&report.goals));
    md.push_str(
        "\nEach ratio is vbmq's median over the reference's median, both measured in this run \
         with the same client, file and CPUs.\n",
    );
    for e in Experiment::ALL {
        let cases: Vec<_> = report
            .cases
            .iter()
            .filter(|c| c.case.experiment == e)
            .collect();
        if cases.is_empty() {
            continue;
        }
        let _ = writeln!(md, "\n## {}\n", e.title());
        let _ = writeln!(md, "{}\n", note(e, report));
        for c in cases {
            let _ = writeln!(md, "### {}\n", case_title(c));
            md.push_str(&case_markdown(c));
            md.push('\n');
        }
        for f in figures.iter().filter(|f| f.experiment == e) {
            let _ = writeln!(md, "![{}]({})\n", f.caption, f.file);
        }
    }
    if !report.skipped.is_empty() {
        md.push_str("\n## Skipped\n\n");
        for s in &report.skipped {
            let _ = writeln!(md, "- {s}");
        }
    }
    let problems: Vec<String> = report
        .cases
        .iter()
        .flat_map(|c| {
            c.points.iter().flat_map(move |p| {
                p.errors
                    .iter()
                    .chain(&p.warnings)
                    .map(move |e| format!("{} / {}: {e}", c.id, p.system.id()))
            })
        })
        .collect();
    if !problems.is_empty() {
        md.push_str("\n## Errors and warnings\n\n");
        for p in problems {
            let _ = writeln!(md, "- {p}");
        }
    }
    md
}

fn setup(report: &Report) -> String {
    let m = &report.machine;
    let s = &report.settings;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "- Machine: {}, {} CPUs, {} GiB, kernel {}.",
        m.cpu_model, m.cpus_online, m.memory_gib, m.kernel
    );
    let _ = writeln!(
        out,
        "- CPUs: client (libblkio) on CPU {}, backend process on CPU {}{}.",
        cpu_list(&report.cpus.client),
        cpu_list(&report.cpus.backend),
        if report.cpus.shared {
            " (shared: one CPU only)"
        } else {
            ""
        }
    );
    let load = |l: Option<f64>| l.map_or("?".to_string(), |l| format!("{l:.1}"));
    let _ = writeln!(
        out,
        "- Load average (1 min) at start and end: {} and {}. Above {} means other work shared \
         the CPUs: absolute figures move with it, ratios taken in one interleaved run much less.",
        load(report.load_average[0]),
        load(report.load_average[1]),
        m.cpus_online
    );
    if let Some(h) = &report.handover {
        let _ = writeln!(
            out,
            "- Hand-over between the client and backend CPUs, one way (median, the lower of a \
             measurement before and one after the runs): {:.1} us to wake \
             a sleeping thread through an eventfd (what an interrupt-driven client pays per \
             completion), {:.2} us for a store to reach a thread spinning on it (what polling \
             pays). A request through any vhost-user backend pays these on top of the storage.",
            h.wakeup_p50_us, h.spin_p50_us
        );
    }
    let _ = writeln!(
        out,
        "- Backing store: {} MiB raw file on tmpfs filled with random data, O_DIRECT.",
        report.disk_bytes >> 20
    );
    let _ = writeln!(
        out,
        "- Client: libblkio (crate `blkio`): `virtio-blk-vhost-user` for vhost-user targets (poll \
         queues for a polling client, normal queues for an interrupt client); for bare metal \
         every host engine on the file, `io_uring` and synchronous `pread`/`pwrite` (fio's \
         `psync`), the better of the two in each case being the reference of ratios and goals."
    );
    let _ = writeln!(
        out,
        "- vbmq {}; qemu-storage-daemon: {}.",
        m.vbmq_version,
        m.qsd_version.as_deref().unwrap_or("not installed")
    );
    let _ = writeln!(
        out,
        "- Each figure is the median of {} runs of {} s (after {} s warm-up), systems interleaved \
         run by run; min and max of every figure are in report.json.",
        s.runs, s.measure_s, s.warmup_s
    );
    let _ = writeln!(
        out,
        "- CPU s/1M IO: backend utime+stime from /proc/PID/stat per 10^6 requests; backend and \
         client CPU: share of one CPU over the measured window. Bare metal has no backend process. \
         Others' CPU: what other processes ran on the client's and backend's CPUs during the \
         window (from /proc/stat), the interference each figure suffered."
    );
    out
}

fn note(e: Experiment, report: &Report) -> String {
    let backend = cpu_list(&report.cpus.backend);
    match e {
        Experiment::Matrix => "Every system on the basic workloads with one queue and a polling \
            client. IOPS x bare and x VBDP are ratios of medians within the case."
            .into(),
        Experiment::InterruptClient => "The client sleeps on the call eventfd instead of spinning \
            (an interrupt-driven guest). Compare with the polling-client rows of the first \
            section (seed 004)."
            .into(),
        Experiment::Queues => format!(
            "One client job per queue, queue counts 1 to the CPU count. The backend has CPU \
             {backend}: where queues outnumber those CPUs they share them, so the figure shows \
             what the backend's cores do with more queues, not the paper's one core per queue. \
             mode=poll needs a CPU per queue and is skipped beyond that."
        ),
        Experiment::Jobs => format!(
            "Baseline runs the export in qemu-storage-daemon's main loop, VBDP in one iothread \
             (all queues on it), vbmq one I/O thread per queue, on backend CPU {backend} (shared \
             when the queues outnumber those CPUs); one queue per job, interrupt client."
        ),
        Experiment::Batching => "`batch=off` makes vbmq submit each request with its own \
            io_uring_enter call instead of one call per batch of available descriptors."
            .into(),
        Experiment::Null => "No storage behind the device: what remains is the virtualization \
            path (vhost-user rings, notifications, request parsing). qemu-storage-daemon runs \
            null-co in one iothread, with read-zeroes=on since vbmq's null device also returns zeros."
            .into(),
        Experiment::Cache => format!(
            "{}{}",
            cache_study::FITS_NOTE,
            hit_ratios(report, Experiment::Cache)
        ),
        Experiment::CloudDisks => "Issue 27's disks against the plain disk (vbmq poll) on the \
            same file: `encrypt=aes-xts` (AES-256-XTS on the queue's thread; backend CPU per I/O \
            beside it); `base=` with the file as the base: a fresh DISK (reads go to the base, \
            a first write copies its 64 KiB block: `spreadwrite` writes 4 KiB at the start of \
            each 64 KiB in order, so each is a block's first until the walk wraps the disk) or a \
            DISK filled with every block (`base-fill=on`, waited for before the run);             `track-changes=on` with one checkpoint begun before the run; the plain disk while             `vbmq ctl snapshot` copies it (copy-before-write) into a file beside it, back to back             through the measured window (their times in the goal's note)."
            .into(),
        Experiment::CacheSpill => format!(
            "{}{}",
            cache_study::SPILL_NOTE,
            hit_ratios(report, Experiment::CacheSpill)
        ),
    }
}

/// The measured cache hit ratios of an experiment's cases, as a list after its note.
fn hit_ratios(report: &Report, e: Experiment) -> String {
    let mut out = String::new();
    for h in &report.cache_hit_ratios {
        let in_experiment = report
            .cases
            .iter()
            .any(|c| c.id == h.case && c.case.experiment == e);
        if !in_experiment {
            continue;
        }
        let value = match (h.ratio, &h.error) {
            (Some(r), _) => format!("{:.1}%", r * 100.0),
            (None, Some(e)) => format!("not measured ({e})"),
            (None, None) => "not measured".into(),
        };
        let _ = write!(out, "\n- hit ratio of {} in {}: {value}", h.system, h.case);
    }
    out
}
