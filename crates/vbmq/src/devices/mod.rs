//! Building a device from its spec: a disk's storage stack, device and bound socket, a share's
//! directory, device and bound socket. Called by `serve` for the devices given at start and by
//! the `Host` for the disks added at run time.

mod disk;
mod handles;
mod layers;
mod share;

pub(crate) use disk::{Built, PassedThin, Source, build_disk};
pub(crate) use handles::Handles;
pub use share::PassedShare;
pub(crate) use share::{build_passed_share, build_share};
