//! What a cache and its checkpoint captures agree on about pending layers (`design/rmw-cache.md`, "Adoption
//! of a capture's files"): which layers the backend gave up (wrote into the engine, or retired), and which
//! layers an adopted capture put into the engine.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard};

/// Shared by a cache and the captures of its layers. Epochs are the layers' (`Layer::epoch`), increasing.
#[derive(Default)]
pub(crate) struct LayerLedger {
    /// Every layer of an epoch below this one was given up by the backend: drained into the engine (or being
    /// drained), retired after an adoption, or the cache is gone (`u64::MAX`). From then on the backend may
    /// write its keys into the engine, so no capture holding it may adopt its files.
    released_below: Mutex<u64>,
    /// Every layer of an epoch below this one is in the engine through an adopted capture's files: the
    /// backend retires it without writing it, and a capture begun afterwards leaves it out of its files.
    adopted_below: AtomicU64,
}

impl LayerLedger {
    /// Epochs below this one are in the engine through adopted files.
    #[inline]
    pub(crate) fn adopted_below(&self) -> u64 {
        self.adopted_below.load(Ordering::Acquire)
    }

    /// Records that the backend gives up every layer below epoch `below` (before it writes any of them into
    /// the engine). Waits for an adoption being installed.
    pub(crate) fn release_below(&self, below: u64) {
        let mut r = self.released_below.lock();
        *r = (*r).max(below);
    }

    /// As [`release_below`](Self::release_below) without waiting: false when an adoption holds the ledger.
    pub(crate) fn try_release_below(&self, below: u64) -> bool {
        match self.released_below.try_lock() {
            Some(mut r) => {
                *r = (*r).max(below);
                true
            }
            None => false,
        }
    }

    /// The claim of a capture whose files hold the layers of epochs `first..` : granted while the backend
    /// has given up none of them. Never waits (the backend may hold the ledger while it writes into the
    /// engine, and that write may wait for the compaction the caller holds back). Hold the guard until the
    /// files are in the engine, then [`adopted`](Self::adopted).
    pub(crate) fn claim(&self, first: u64) -> Option<MutexGuard<'_, u64>> {
        let g = self.released_below.try_lock()?;
        (*g <= first).then_some(g)
    }

    /// Records, under a granted claim, that the layers below epoch `below` are in the engine.
    pub(crate) fn adopted(&self, claim: MutexGuard<'_, u64>, below: u64) {
        self.adopted_below.fetch_max(below, Ordering::AcqRel);
        drop(claim);
    }
}
