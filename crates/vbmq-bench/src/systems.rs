//! The catalogue of the systems compared: what each is, its name in reports, and what its
//! client connects to. `launcher` starts them.

use std::fmt;
use std::path::PathBuf;

use serde::{Serialize, Serializer};

/// vbmq's I/O thread mode (`mode=` of `--disk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitMode {
    /// Sleep on the kick eventfd.
    Event,
    /// Spin on the available ring.
    Poll,
    /// Spin for a while after work, then sleep.
    Adaptive,
}

impl WaitMode {
    /// The `mode=` value.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitMode::Event => "event",
            WaitMode::Poll => "poll",
            WaitMode::Adaptive => "adaptive",
        }
    }
}

/// What a vbmq disk serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiskSetup {
    /// `path=` the backing file, O_DIRECT.
    File,
    /// `path=` the backing file with `direct=off`: through the host page cache.
    PageCache,
    /// `mem=` loaded from the backing file (`image=`): a hypervisor-side DRAM copy.
    Memory,
    /// `path=` the backing file, O_DIRECT, behind vbmq's DRAM read cache of `percent` of the
    /// disk's size (`cache=`, filled from the file at start with `cache-preload=on`).
    Cache {
        /// Cache size as a percentage of the disk.
        percent: u16,
    },
    /// `null=`: no storage at all.
    Null,
    /// `path=` the backing file, O_DIRECT, with every read and write through io_uring
    /// (`io=ring`), as the batching ablation needs on a file vbmq would otherwise read inline.
    FileRing,
    /// `path=` the backing file encrypted (`encrypt=aes-xts`, a fixed key in the run
    /// directory): the file's random bytes are its ciphertext.
    Encrypted,
    /// `path=DISK,base=` the backing file: a thin disk beside it. `copied`: DISK was filled
    /// with every block (`base-fill=on`, waited for), so writes land on DISK's own blocks;
    /// otherwise DISK is made empty before each run, so reads go to the base and writes copy.
    Thin {
        /// Every block is DISK's own.
        copied: bool,
    },
    /// `path=` the backing file with `track-changes=on` and one live checkpoint (`vbmq ctl
    /// checkpoint`, taken after the backend starts): every write marks its block in the map.
    Tracked,
    /// `path=` the backing file while `vbmq ctl snapshot` copies it (copy-before-write, tmpfs
    /// has no reflink) into a file beside it, back to back from the start of the measured window
    /// to its end.
    Snapshotting,
}

/// One system under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum System {
    /// libblkio's io_uring driver on the file itself, O_DIRECT: what the host gets.
    BareMetal,
    /// `pread`/`pwrite` on the file, O_DIRECT, from the client threads (fio's `psync`): on
    /// tmpfs, where io_uring hands reads to kernel workers, the host's fastest engine.
    BareMetalPsync,
    /// libblkio's io_uring driver on the file without O_DIRECT: host page-cache reads.
    BareMetalPageCache,
    /// `pread`/`pwrite` on the file without O_DIRECT: host page-cache reads the fastest way on
    /// this kernel (io_uring hands every tmpfs read to a kernel worker); seed 003's reference
    /// with [`System::BareMetalPageCache`], the better of the two per case.
    BareMetalPageCachePsync,
    /// `vbmq serve` (this executable).
    Vbmq {
        /// The I/O thread mode.
        mode: WaitMode,
        /// False runs the `batch=off` ablation: one request per system call.
        batch: bool,
        /// What the disk serves.
        storage: DiskSetup,
    },
    /// qemu-storage-daemon's vhost-user-blk export in its main loop (the paper's Baseline).
    QsdBaseline,
    /// qemu-storage-daemon with one iothread for the export (the paper's VBDP).
    QsdVbdp,
    /// qemu-storage-daemon's `null-co` driver with one iothread; reads give zeros, as vbmq's
    /// `null=` does.
    QsdNull,
    /// qemu-storage-daemon with one iothread on the file with `cache.direct=off`: host page-cache
    /// reads through QEMU (seed 003's hypervisor-side cache as deployed today).
    QsdPageCache,
}

impl System {
    /// vbmq on the file in `mode`, batching on.
    pub const fn vbmq(mode: WaitMode) -> Self {
        Self::vbmq_on(DiskSetup::File, mode)
    }

    /// vbmq's null device in `mode`.
    pub const fn vbmq_null(mode: WaitMode) -> Self {
        Self::vbmq_on(DiskSetup::Null, mode)
    }

    /// vbmq serving `storage` in `mode`, batching on.
    pub const fn vbmq_on(storage: DiskSetup, mode: WaitMode) -> Self {
        System::Vbmq {
            mode,
            batch: true,
            storage,
        }
    }

    /// The same system with batched submission turned off (vbmq only).
    pub const fn unbatched(self) -> Self {
        match self {
            System::Vbmq { mode, storage, .. } => System::Vbmq {
                mode,
                batch: false,
                storage,
            },
            other => other,
        }
    }

    /// A short stable identifier, e.g. `vbmq-poll` or `qsd-vbdp`.
    pub fn id(&self) -> String {
        match self {
            System::BareMetal => "bare-metal".into(),
            System::BareMetalPsync => "bare-metal-psync".into(),
            System::BareMetalPageCache => "bare-metal-pagecache".into(),
            System::BareMetalPageCachePsync => "bare-metal-pagecache-psync".into(),
            System::Vbmq {
                mode,
                batch,
                storage,
            } => {
                let storage = match storage {
                    DiskSetup::File => String::new(),
                    DiskSetup::PageCache => "pagecache-".into(),
                    DiskSetup::Memory => "mem-".into(),
                    DiskSetup::Cache { percent } => format!("cache{percent}-"),
                    DiskSetup::Null => "null-".into(),
                    DiskSetup::FileRing => "ring-".into(),
                    DiskSetup::Encrypted => "crypt-".into(),
                    DiskSetup::Thin { copied: false } => "thin-".into(),
                    DiskSetup::Thin { copied: true } => "thin-copied-".into(),
                    DiskSetup::Tracked => "tracked-".into(),
                    DiskSetup::Snapshotting => "snapshotting-".into(),
                };
                let batch = if *batch { "" } else { "-nobatch" };
                format!("vbmq-{storage}{}{batch}", mode.as_str())
            }
            System::QsdBaseline => "qsd-baseline".into(),
            System::QsdVbdp => "qsd-vbdp".into(),
            System::QsdNull => "qsd-null".into(),
            System::QsdPageCache => "qsd-pagecache".into(),
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            System::BareMetal => f.write_str("bare metal"),
            System::BareMetalPsync => f.write_str("bare metal (psync)"),
            System::BareMetalPageCache => f.write_str("bare metal (page cache)"),
            System::BareMetalPageCachePsync => f.write_str("bare metal (page cache, psync)"),
            System::Vbmq {
                mode,
                batch,
                storage,
            } => {
                f.write_str("vbmq ")?;
                match storage {
                    DiskSetup::File => {}
                    DiskSetup::PageCache => f.write_str("direct=off ")?,
                    DiskSetup::Memory => f.write_str("mem= ")?,
                    DiskSetup::Cache { percent } => write!(f, "cache={percent}% ")?,
                    DiskSetup::Null => f.write_str("null ")?,
                    DiskSetup::FileRing => f.write_str("io=ring ")?,
                    DiskSetup::Encrypted => f.write_str("encrypt=aes-xts ")?,
                    DiskSetup::Thin { copied: false } => f.write_str("base= (fresh DISK) ")?,
                    DiskSetup::Thin { copied: true } => f.write_str("base= (blocks copied) ")?,
                    DiskSetup::Tracked => f.write_str("track-changes=on (1 checkpoint) ")?,
                    DiskSetup::Snapshotting => f.write_str("during snapshots ")?,
                }
                f.write_str(mode.as_str())?;
                if !batch {
                    f.write_str(" batch=off")?;
                }
                Ok(())
            }
            System::QsdBaseline => f.write_str("Baseline (qsd main loop)"),
            System::QsdVbdp => f.write_str("VBDP (qsd iothread)"),
            System::QsdNull => f.write_str("qsd null-co"),
            System::QsdPageCache => f.write_str("qsd cache.direct=off"),
        }
    }
}

impl Serialize for System {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.id())
    }
}

/// What the client connects to.
#[derive(Clone, Debug)]
pub enum Target {
    /// The backing file, through libblkio's io_uring driver.
    File {
        /// The file.
        path: PathBuf,
        /// O_DIRECT (false: through the page cache).
        direct: bool,
    },
    /// A vhost-user-blk socket, through libblkio's virtio-blk-vhost-user driver.
    VhostUser(PathBuf),
    /// The backing file through synchronous `pread`/`pwrite` (fio's `psync`).
    FileSync {
        /// The file.
        path: PathBuf,
        /// O_DIRECT (false: through the page cache).
        direct: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct() {
        let systems = [
            System::BareMetal,
            System::BareMetalPsync,
            System::vbmq(WaitMode::Poll),
            System::vbmq(WaitMode::Poll).unbatched(),
            System::vbmq(WaitMode::Event),
            System::vbmq(WaitMode::Adaptive),
            System::vbmq_null(WaitMode::Poll),
            System::vbmq_on(DiskSetup::Memory, WaitMode::Poll),
            System::vbmq_on(DiskSetup::PageCache, WaitMode::Poll),
            System::vbmq_on(DiskSetup::Encrypted, WaitMode::Poll),
            System::vbmq_on(DiskSetup::Thin { copied: false }, WaitMode::Poll),
            System::vbmq_on(DiskSetup::Thin { copied: true }, WaitMode::Poll),
            System::vbmq_on(DiskSetup::Tracked, WaitMode::Poll),
            System::vbmq_on(DiskSetup::Snapshotting, WaitMode::Poll),
            System::BareMetalPageCache,
            System::BareMetalPageCachePsync,
            System::QsdBaseline,
            System::QsdVbdp,
            System::QsdNull,
        ];
        let mut ids: Vec<_> = systems.iter().map(System::id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), systems.len());
        assert_eq!(
            System::vbmq(WaitMode::Event).unbatched().id(),
            "vbmq-event-nobatch"
        );
        assert_eq!(System::QsdVbdp.unbatched(), System::QsdVbdp);
    }
}
