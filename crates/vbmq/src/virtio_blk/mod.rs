//! The virtio-blk device model: features, config space and request parsing, which turn guest
//! descriptor chains into validated requests (and resizes the storage under a device:
//! `resize_disk`); and its queue handler ([`queue`]), which hands the requests to the queue's
//! engine and completes them.

mod config_space;
mod device;
mod guest_gate;
pub mod queue;
mod request;
mod resize;
mod writes_in_flight;

pub use config_space::config_space;
pub use device::{BlkDevice, DISCARD_SEG_MAX, SECTOR_SIZE, SEG_MAX};
pub use guest_gate::GuestGate;
pub use request::{Payload, Range, Rejection, Request, RequestError, RequestType, parse};
pub use resize::resize_disk;
pub use writes_in_flight::{WriteTicket, WritesInFlight};

pub use virtio_bindings::virtio_blk::{VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP};

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod request_tests;

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // Test inputs are cut to size.
mod request_layout_tests;
