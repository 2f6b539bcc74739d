//! The layers of a disk: each is a small type over the disk below it that overrides only what
//! it changes (as QEMU's block filters do); [`Layered`] passes everything else down. A layer
//! cannot forget to pass a call on: what it adds to [`Layer::close`] runs after the disk below
//! has closed, and every other method's default is the disk below's. The verbs only one layer
//! answers (a snapshot, the changed-block maps, the writer seat) are not on [`Disk`]: the
//! builder keeps a handle on that layer beside the disk (`devices/handles.rs`).
//!
//! Per queue, a layer that keeps state for each operation builds its engine from a [`Stage`]
//! (see `stage`): the tag slab, the answers decided without the engine below, the reaping pass
//! and the wait at drop are written there once. A request served in parts counts them in
//! [`Splits`] (see `split`).

mod slab;
mod split;
mod stage;

use std::io;
use std::sync::Arc;

pub use self::slab::Slab;
pub use self::split::{Part, Splits, errno, transfer_error};
pub use self::stage::{Below, Stage, StagedEngine};
use super::{Disk, Engine, EngineOptions, Geometry};
use crate::nbd::Export;

/// One layer of a disk: what it changes of the disk below (`below` in every method).
pub trait Layer: Send + Sync {
    /// A new engine for one queue, over the disk below's.
    fn engine(&self, below: &dyn Disk, options: EngineOptions) -> io::Result<Box<dyn Engine>>;

    /// Size and block size.
    fn geometry(&self, below: &dyn Disk) -> Geometry {
        below.geometry()
    }

    /// Whether discard and write-zeroes are supported.
    fn supports_discard(&self, below: &dyn Disk) -> bool {
        below.supports_discard()
    }

    /// Counters worth logging (see [`Disk::stats`]).
    fn stats(&self, below: &dyn Disk) -> Vec<(&'static str, u64)> {
        below.stats()
    }

    /// Changes the capacity (see [`Disk::resize`]).
    fn resize(&self, below: &dyn Disk, bytes: u64, shrink: bool) -> io::Result<u64> {
        below.resize(bytes, shrink)
    }

    /// Hears of the storage's own size changes (see [`Disk::on_resize`]).
    fn on_resize(&self, below: &dyn Disk, listener: Box<dyn Fn(u64) + Send + Sync>) {
        below.on_resize(listener);
    }

    /// Why an export of the disk below would not serve what the guest sees, even through
    /// [`Layer::export_view`], if it would not (see [`Disk::export_refused`]).
    fn export_refused(&self) -> Option<&'static str> {
        None
    }

    /// What an export of the disk below serves through this layer (see [`Disk::export_view`]).
    fn export_view(&self, export: Arc<dyn Export>) -> Arc<dyn Export> {
        export
    }

    /// Releases what the layer holds past exit; the disk below is closed already.
    fn close(&self) {}
}

/// A disk: layer `L` over the disk below.
pub struct Layered<L> {
    below: Arc<dyn Disk>,
    layer: L,
}

impl<L: Layer> Layered<L> {
    /// `layer` over `below`.
    pub fn new(below: Arc<dyn Disk>, layer: L) -> Self {
        Layered { below, layer }
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    /// The disk below.
    pub fn below(&self) -> &dyn Disk {
        &*self.below
    }
}

impl<L: Layer> Disk for Layered<L> {
    fn geometry(&self) -> Geometry {
        self.layer.geometry(&*self.below)
    }

    fn engine(&self, options: EngineOptions) -> io::Result<Box<dyn Engine>> {
        self.layer.engine(&*self.below, options)
    }

    fn supports_discard(&self) -> bool {
        self.layer.supports_discard(&*self.below)
    }

    fn stats(&self) -> Vec<(&'static str, u64)> {
        self.layer.stats(&*self.below)
    }

    fn resize(&self, bytes: u64, shrink: bool) -> io::Result<u64> {
        self.layer.resize(&*self.below, bytes, shrink)
    }

    fn on_resize(&self, listener: Box<dyn Fn(u64) + Send + Sync>) {
        self.layer.on_resize(&*self.below, listener);
    }

    fn close(&self) {
        self.below.close();
        self.layer.close();
    }

    fn export_refused(&self) -> Option<&'static str> {
        self.layer.export_refused()
    }

    fn export_view(&self, export: Arc<dyn Export>) -> Arc<dyn Export> {
        self.layer.export_view(export)
    }
}
