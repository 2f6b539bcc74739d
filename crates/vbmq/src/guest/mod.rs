//! Guest memory as vbmq maps it, below everything that touches it: the frontend's memory table
//! and its checks, the guard that survives its faults, the dirty log of a migration, and the
//! in-flight record a restarted backend resumes from. Imported by the transport (`vhost_user`)
//! and the queue workers; imports neither.

pub mod dirty_log;
pub mod inflight_region;
pub mod memory_faults;
pub mod memory_table;

use vm_memory::GuestMemoryMmap;

/// Guest memory as vbmq maps it: every region with its dirty log.
pub type GuestMemory = GuestMemoryMmap<dirty_log::DirtyLog>;

/// A virtqueue over that memory.
pub type Vring = vhost_user_backend::VringRwLock<vm_memory::GuestMemoryAtomic<GuestMemory>>;

/// Regions one connection may map.
pub const MAX_REGIONS: usize = 509;
