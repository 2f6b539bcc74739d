//! What is measured: the I/O patterns, the client kinds, and the experiments built from them.

use std::fmt;

use serde::Serialize;

use super::systems::{DiskSetup, System, WaitMode};

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Device to memory.
    Read,
    /// Memory to device.
    Write,
}

/// Where the next request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Uniformly random, block-aligned offsets over the whole disk.
    Random,
    /// Consecutive blocks; each job walks its own slice of the disk.
    Sequential,
    /// One request at the start of each 64 KiB (a thin disk's block), in order: on a fresh
    /// `base=` disk every write is a block's first, until the walk wraps.
    Spread,
}

/// The stride of [`Pattern::Spread`]: `base-block`'s default.
pub const SPREAD_STRIDE: u32 = 64 << 10;

/// One job's I/O pattern: fio's `rw`, `bs` and `iodepth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Read or write.
    pub op: Op,
    /// Random or sequential.
    pub pattern: Pattern,
    /// Bytes per request.
    pub block_size: u32,
    /// Requests kept in flight per job.
    pub iodepth: u32,
}

impl Workload {
    const fn new(op: Op, pattern: Pattern, block_size: u32, iodepth: u32) -> Self {
        Workload {
            op,
            pattern,
            block_size,
            iodepth,
        }
    }

    /// 4 KiB random reads.
    pub const fn randread(iodepth: u32) -> Self {
        Self::new(Op::Read, Pattern::Random, 4096, iodepth)
    }

    /// 4 KiB random writes.
    pub const fn randwrite(iodepth: u32) -> Self {
        Self::new(Op::Write, Pattern::Random, 4096, iodepth)
    }

    /// 4 KiB writes, one per 64 KiB in order ([`Pattern::Spread`]).
    pub const fn spreadwrite(iodepth: u32) -> Self {
        Self::new(Op::Write, Pattern::Spread, 4096, iodepth)
    }

    /// 128 KiB sequential reads.
    pub const fn seqread(iodepth: u32) -> Self {
        Self::new(Op::Read, Pattern::Sequential, 128 << 10, iodepth)
    }

    /// 128 KiB sequential writes.
    pub const fn seqwrite(iodepth: u32) -> Self {
        Self::new(Op::Write, Pattern::Sequential, 128 << 10, iodepth)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match (self.pattern, self.op) {
            (Pattern::Random, Op::Read) => "randread",
            (Pattern::Random, Op::Write) => "randwrite",
            (Pattern::Sequential, Op::Read) => "read",
            (Pattern::Sequential, Op::Write) => "write",
            (Pattern::Spread, Op::Read) => "spreadread",
            (Pattern::Spread, Op::Write) => "spreadwrite",
        };
        write!(f, "{kind} {}K QD{}", self.block_size / 1024, self.iodepth)
    }
}

/// How the client learns that a request completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientMode {
    /// Spins on the used ring (libblkio poll queues): a polling guest driver.
    Polling,
    /// Sleeps on the call eventfd (normal queues): an interrupt-driven guest.
    Interrupt,
}

impl fmt::Display for ClientMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientMode::Polling => "polling client",
            ClientMode::Interrupt => "interrupt client",
        })
    }
}

/// The experiments, in the order they run and are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Experiment {
    /// Every system on every basic workload, one queue, polling client.
    Matrix,
    /// Seed 004: the interrupt-driven client against the polling one.
    InterruptClient,
    /// VBMq Fig. 7: IOPS against the number of queues.
    Queues,
    /// VBMq Fig. 10: systems against the number of jobs.
    Jobs,
    /// Seed 002 (KVM Forum 2014): batched against one-at-a-time submission.
    Batching,
    /// The virtualization path alone: vbmq `null=` against qemu-storage-daemon `null-co`.
    Null,
    /// Seed 003: a hypervisor-side DRAM cache hit against a host page-cache read.
    Cache,
    /// Seed 003: a working set four times vbmq's cache.
    CacheSpill,
    /// Issue 27: encrypted, `base=` and `track-changes=on` disks, and writes during snapshots,
    /// against the plain disk on the same file.
    CloudDisks,
}

impl Experiment {
    /// Every experiment, in the order they run and are reported.
    pub const ALL: [Experiment; 9] = [
        Experiment::Matrix,
        Experiment::InterruptClient,
        Experiment::Queues,
        Experiment::Jobs,
        Experiment::Batching,
        Experiment::Null,
        Experiment::Cache,
        Experiment::CacheSpill,
        Experiment::CloudDisks,
    ];

    /// A one-line title for tables and charts.
    pub fn title(self) -> &'static str {
        match self {
            Experiment::Matrix => "All systems, 1 queue, polling client",
            Experiment::InterruptClient => "Interrupt-driven client (seed 004)",
            Experiment::Queues => "IOPS against queues (VBMq Fig. 7)",
            Experiment::Jobs => "Systems against jobs (VBMq Fig. 10)",
            Experiment::Batching => "Batched against unbatched submission (seed 002)",
            Experiment::Null => "Null device: the virtualization path alone",
            Experiment::Cache => "Hypervisor-side DRAM cache hits (seed 003)",
            Experiment::CacheSpill => "Working set four times vbmq's cache (seed 003)",
            Experiment::CloudDisks => {
                "Encrypted, base=, tracked and snapshotted disks against the plain disk"
            }
        }
    }
}

/// One measured configuration: every system in `systems` runs it, interleaved.
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// Which experiment it belongs to.
    pub experiment: Experiment,
    /// What each job does.
    pub workload: Workload,
    /// Polling or interrupt-driven completion in the client.
    pub client: ClientMode,
    /// Client threads; each drives its own queue, so this is also the number of queues.
    pub jobs: usize,
    /// The systems compared.
    pub systems: Vec<System>,
}

impl Case {
    /// A stable identifier, e.g. `matrix/randread-4k-qd32/polling/j1`.
    pub fn id(&self) -> String {
        let w = self.workload.to_string().to_lowercase().replace(' ', "-");
        let client = match self.client {
            ClientMode::Polling => "polling",
            ClientMode::Interrupt => "interrupt",
        };
        let experiment = serde_json::to_value(self.experiment)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        format!("{experiment}/{w}/{client}/j{}", self.jobs)
    }
}

/// The cases for a full (`quick` false) or quick run on a machine with `ncpu` CPUs.
pub fn plan(quick: bool, ncpu: usize) -> Vec<Case> {
    let bare = System::BareMetal;
    let poll = System::vbmq(WaitMode::Poll);
    let event = System::vbmq(WaitMode::Event);
    let adaptive = System::vbmq(WaitMode::Adaptive);
    let (baseline, vbdp) = (System::QsdBaseline, System::QsdVbdp);
    let case = |experiment, workload, client, jobs, systems: &[System]| Case {
        experiment,
        workload,
        client,
        jobs,
        systems: systems.to_vec(),
    };
    let mut cases = Vec::new();

    // Bare metal is every host engine measured; the best per case is the reference (`bare`).
    let psync = System::BareMetalPsync;
    let all = [bare, psync, poll, event, adaptive, baseline, vbdp];
    let matrix: &[Workload] = if quick {
        &[
            Workload::randread(1),
            Workload::randread(32),
            Workload::randwrite(32),
        ]
    } else {
        &[
            Workload::randread(1),
            Workload::randread(32),
            Workload::randwrite(1),
            Workload::randwrite(32),
            Workload::seqread(8),
            Workload::seqwrite(8),
        ]
    };
    for &w in matrix {
        cases.push(case(Experiment::Matrix, w, ClientMode::Polling, 1, &all));
    }

    let irq: &[Workload] = if quick {
        &[Workload::randread(1)]
    } else {
        &[Workload::randread(1), Workload::randread(32)]
    };
    for &w in irq {
        let systems = [bare, psync, poll, event, adaptive, vbdp];
        cases.push(case(
            Experiment::InterruptClient,
            w,
            ClientMode::Interrupt,
            1,
            &systems,
        ));
    }

    for queues in queue_counts(ncpu) {
        let systems = [bare, psync, poll, adaptive, vbdp];
        let w = Workload::randread(32);
        cases.push(case(
            Experiment::Queues,
            w,
            ClientMode::Polling,
            queues,
            &systems,
        ));
    }

    let jobs: &[usize] = if quick { &[1, 2] } else { &[1, 2, 4] };
    for &j in jobs {
        let systems = [bare, psync, baseline, vbdp, adaptive];
        let w = Workload::randread(1);
        cases.push(case(
            Experiment::Jobs,
            w,
            ClientMode::Interrupt,
            j,
            &systems,
        ));
    }

    cases.push(batching_case(quick));
    cases.extend(null_cases(quick));
    cases.extend(cloud_disk_cases());
    cases
}

/// The ablation of batched submissions, with every request through io_uring.
fn batching_case(quick: bool) -> Case {
    // On the tmpfs file vbmq reads inline, one system call per request either way: the
    // ablation runs with every request through io_uring (`io=ring`).
    let ring = |mode| System::Vbmq {
        mode,
        batch: true,
        storage: DiskSetup::FileRing,
    };
    let (poll_ring, event_ring) = (ring(WaitMode::Poll), ring(WaitMode::Event));
    let systems: Vec<System> = if quick {
        vec![poll_ring, poll_ring.unbatched()]
    } else {
        vec![
            poll_ring,
            poll_ring.unbatched(),
            event_ring,
            event_ring.unbatched(),
        ]
    };
    Case {
        experiment: Experiment::Batching,
        workload: Workload::randread(32),
        client: ClientMode::Polling,
        jobs: 1,
        systems,
    }
}

/// The null devices: the request path alone, with no storage beneath.
fn null_cases(quick: bool) -> Vec<Case> {
    let null: &[Workload] = if quick {
        &[Workload::randread(32)]
    } else {
        &[Workload::randread(1), Workload::randread(32)]
    };
    let systems: &[System] = if quick {
        &[System::vbmq_null(WaitMode::Poll), System::QsdNull]
    } else {
        &[
            System::vbmq_null(WaitMode::Poll),
            System::vbmq_null(WaitMode::Adaptive),
            System::QsdNull,
        ]
    };
    null.iter()
        .map(|&workload| Case {
            experiment: Experiment::Null,
            workload,
            client: ClientMode::Polling,
            jobs: 1,
            systems: systems.to_vec(),
        })
        .collect()
}

/// Issue 27's disks against the plain disk on the same file, 4 KiB QD32, polling client,
/// mode=poll: the same in a quick and a full run. Another kind of disk is one more system in
/// the case.
fn cloud_disk_cases() -> Vec<Case> {
    let on = |storage| System::vbmq_on(storage, WaitMode::Poll);
    let plain = on(DiskSetup::File);
    let crypt = on(DiskSetup::Encrypted);
    let fresh = on(DiskSetup::Thin { copied: false });
    let copied = on(DiskSetup::Thin { copied: true });
    let tracked = on(DiskSetup::Tracked);
    let snapshotting = on(DiskSetup::Snapshotting);
    let case = |workload, systems: Vec<System>| Case {
        experiment: Experiment::CloudDisks,
        workload,
        client: ClientMode::Polling,
        jobs: 1,
        systems,
    };
    vec![
        // A fresh base= disk reads every block from the base.
        case(Workload::randread(32), vec![plain, crypt, fresh]),
        // Also: writes with one changed-block map live; writes while copy-before-write
        // snapshots of the disk run back to back.
        case(
            Workload::randwrite(32),
            vec![plain, crypt, copied, tracked, snapshotting],
        ),
        // First writes: each copies its 64 KiB block from the base.
        case(Workload::spreadwrite(32), vec![plain, fresh]),
    ]
}

/// 1..=ncpu, thinned to powers of two (and `ncpu` itself) so a large machine stays a few minutes.
fn queue_counts(ncpu: usize) -> Vec<usize> {
    let ncpu = ncpu.max(1);
    let mut counts: Vec<usize> = (0..)
        .map(|shift| 1usize << shift)
        .take_while(|&n| n < ncpu)
        .collect();
    counts.push(ncpu);
    counts
}

/// Keeps the cases whose identifier contains `text`; in the others keeps only the systems whose
/// identifier contains it, dropping cases left empty.
pub fn filter(cases: Vec<Case>, text: &str) -> Vec<Case> {
    cases
        .into_iter()
        .filter_map(|mut c| {
            if !c.id().contains(text) {
                c.systems.retain(|s| s.id().contains(text));
            }
            (!c.systems.is_empty()).then_some(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_like_fio() {
        assert_eq!(Workload::randread(32).to_string(), "randread 4K QD32");
        assert_eq!(Workload::seqwrite(8).to_string(), "write 128K QD8");
    }

    #[test]
    fn case_ids_are_unique() {
        for quick in [true, false] {
            let cases = plan(quick, 2);
            let mut ids: Vec<_> = cases.iter().map(Case::id).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), cases.len());
        }
    }

    #[test]
    fn quick_plan_is_smaller_and_covers_every_experiment() {
        let quick = plan(true, 2);
        let full = plan(false, 2);
        let points = |c: &[Case]| c.iter().map(|c| c.systems.len()).sum::<usize>();
        assert!(points(&quick) < points(&full));
        // The cache study runs the cache experiments, outside the plan.
        let planned = Experiment::ALL
            .into_iter()
            .filter(|e| !matches!(e, Experiment::Cache | Experiment::CacheSpill));
        for e in planned {
            assert!(quick.iter().any(|c| c.experiment == e), "{e:?}");
        }
    }

    #[test]
    fn filter_by_case_or_system() {
        let all = plan(true, 2);
        let by_case = filter(all.clone(), "matrix/randread-4k-qd32/");
        assert_eq!(by_case.len(), 1);
        assert_eq!(by_case[0].systems.len(), 7);
        let by_system = filter(all, "qsd-null");
        assert_eq!(by_system.len(), 1);
        assert_eq!(by_system[0].systems, vec![System::QsdNull]);
    }

    #[test]
    fn every_case_with_bare_metal_runs_every_host_engine() {
        let engines = crate::bare::engines(System::BareMetal).unwrap();
        for quick in [true, false] {
            for c in plan(quick, 2) {
                let bare = c.systems.iter().filter(|s| engines.contains(s)).count();
                assert!(bare == 0 || bare == engines.len(), "{}", c.id());
            }
        }
    }

    #[test]
    fn queues_follow_cpu_count() {
        let queues = |ncpu| {
            plan(false, ncpu)
                .iter()
                .filter(|c| c.experiment == Experiment::Queues)
                .map(|c| c.jobs)
                .collect::<Vec<_>>()
        };
        assert_eq!(queues(1), [1]);
        assert_eq!(queues(2), [1, 2]);
        assert_eq!(queues(4), [1, 2, 4]);
        assert_eq!(queues(6), [1, 2, 4, 6]);
    }
}
