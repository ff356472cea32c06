//! The LSM backend's read-modify-write cache settings: capacity, admission, its charge on the memory budget,
//! and writing it back.

use std::sync::atomic::Ordering;

use super::cache_share::{CacheCharge, ShareMember};
use super::LsmBackend;
use crate::backend::lsm_cache::RmwCache;
use crate::error::Result;

impl LsmBackend {
    /// Sets the capacity of the read-modify-write cache in bytes (`design/rmw-cache.md`): the allocations of
    /// keys and values too long to sit in an entry's slot, and a fixed per-entry overhead. 0 turns the cache off (its dirty entries are written back first); a
    /// smaller capacity evicts at once. The capacity (with the doorkeeper's table, 1/64 of it, and the hash table's buckets for the most entries
    /// the capacity holds, 1/10 to 1/5 of it) is reserved
    /// from the engine environment's memory budget ([`MemoryBudget::reserve`](keyed_state_lsm::MemoryBudget::reserve)):
    /// with a [`StateEnv`](crate::env::StateEnv) budget the cache lives inside it, shrinking the shared block
    /// cache, and the budget's breakdown counts it under `reserved`. A key the cache does not hold is taken
    /// in at once while the cache has room for it; once it is full, on its second miss within a while (a
    /// doorkeeper of about 1/64 of the capacity remembers the first), so that a key touched once costs what
    /// it costs without the cache ([`set_rmw_cache_admission`](Self::set_rmw_cache_admission)).
    ///
    /// A capacity set here is this backend's own: it leaves the budget's share for default caches
    /// ([`use_default_cache`](Self::use_default_cache) goes back to it).
    pub fn set_rmw_cache_capacity(&mut self, capacity: usize) -> Result<()> {
        self.share = None;
        self.resize_cache(capacity)
    }

    /// Gives the backend the default read-modify-write cache, as it has when opened: on an engine
    /// environment with a memory budget, its part of the budget's share for caches
    /// ([`StateEnvOptions::rmw_cache_ratio`](crate::env::StateEnvOptions::rmw_cache_ratio), default
    /// [`DEFAULT_RMW_CACHE_RATIO`](super::DEFAULT_RMW_CACHE_RATIO), 0: none) divided equally among the backends
    /// of the environment that use it, made and resized as they open and close at this backend's next `get`,
    /// `put`, `delete`, `map_get`, `map_put` or `map_remove`; without a budget, none (set a capacity with
    /// [`set_rmw_cache_capacity`](Self::set_rmw_cache_capacity)).
    pub fn use_default_cache(&mut self) -> Result<()> {
        let budget = self.shared.db.env().memory();
        if budget.capacity().is_some() {
            // Made (or resized) at the next operation: backends opened together size their caches for
            // their final part.
            if self.share.is_none() {
                self.share = Some(ShareMember::join(budget));
            }
            Ok(())
        } else {
            self.share = None;
            self.resize_cache(0)
        }
    }

    /// Resizes the cache to this backend's part of the budget's share if the share changed.
    #[inline]
    pub(super) fn follow_share(&mut self) -> Result<()> {
        match &self.share {
            Some(m) if m.changed() => self.resize_to_share(),
            _ => Ok(()),
        }
    }

    #[cold]
    fn resize_to_share(&mut self) -> Result<()> {
        let capacity = self.share.as_mut().map_or(0, |m| m.capacity());
        self.resize_cache(capacity)
    }

    /// How many backends the budget's share for default caches is divided among (0: this backend's
    /// capacity is not a part of a share).
    pub fn rmw_cache_share_members(&self) -> usize {
        self.share.as_ref().map_or(0, |m| m.members())
    }

    fn resize_cache(&mut self, capacity: usize) -> Result<()> {
        let r = self.resize_cache_uncharged(capacity);
        // Also after a failed write-back: the cache may have changed size before it.
        self.charge_cache();
        r
    }

    fn resize_cache_uncharged(&mut self, capacity: usize) -> Result<()> {
        let db = &self.shared.db;
        let (first_touch, stepping) = (self.cache_first_touch, self.cache_stepping);
        let make = |n| {
            let mut c = RmwCache::new(n, first_touch);
            c.set_stepping(stepping);
            c
        };
        match (&mut self.cache, capacity) {
            (Some(c), 0) => {
                c.clear(db)?;
                self.cache = None;
                self.shared.unsynced.store(false, Ordering::Release);
            }
            // Its hash table grew for a larger capacity and does not shrink: written back and made
            // again, so that the footprint follows the capacity (a share divided among more backends).
            (Some(c), n) if c.table_oversized_for(n) => {
                c.clear(db)?;
                self.cache = Some(make(n));
            }
            (Some(c), n) => {
                c.set_capacity(n);
                c.evict(None, db)?;
            }
            (None, 0) => {}
            (None, n) => self.cache = Some(make(n)),
        }
        Ok(())
    }

    /// Makes the cache's charge on the memory budget its footprint (none without a cache).
    pub(super) fn charge_cache(&mut self) {
        self.shared.step.record(self.cache.as_ref(), false);
        match (&self.cache, &mut self.cache_charge) {
            (None, charge) => *charge = None,
            (Some(c), Some(r)) => r.resize(c.footprint()),
            (Some(c), charge @ None) => {
                *charge = Some(CacheCharge::new(
                    self.shared.db.env().memory(),
                    c.footprint(),
                ))
            }
        }
    }

    /// `true`: the cache takes every key in on its first miss, full or not, without the doorkeeper (tests
    /// use it to send every write through the cache). Writes back and starts a new, empty cache of the same
    /// capacity.
    pub fn set_rmw_cache_admission(&mut self, first_touch: bool) -> Result<()> {
        // Kept for a cache made later (a default one is made at the backend's first operation).
        self.cache_first_touch = first_touch;
        if let Some(c) = &mut self.cache {
            if c.admits_on_first_touch() != first_touch {
                c.clear(&self.shared.db)?;
                let mut fresh = RmwCache::new(c.capacity(), first_touch);
                fresh.set_stepping(self.cache_stepping);
                self.cache = Some(fresh);
            }
        }
        self.charge_cache();
        Ok(())
    }

    /// This backend with a read-modify-write cache of `capacity` bytes ([`set_rmw_cache_capacity`](
    /// Self::set_rmw_cache_capacity)).
    pub fn with_rmw_cache(mut self, capacity: usize) -> Result<Self> {
        self.set_rmw_cache_capacity(capacity)?;
        Ok(self)
    }

    /// The capacity of the read-modify-write cache in bytes (0: off).
    pub fn rmw_cache_capacity(&self) -> usize {
        self.cache.as_ref().map_or(0, RmwCache::capacity)
    }

    /// The bytes the read-modify-write cache holds now.
    pub fn rmw_cache_bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, RmwCache::used)
    }

    /// Writes every dirty entry of the cache into the engine, so that the engine alone holds the whole
    /// state (for [`LsmEngine::checkpoint`](super::LsmEngine::checkpoint) and other engine-level reads).
    pub fn write_back(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cache {
            if c.has_dirty() {
                c.write_back_all(&self.shared.db)?;
            }
        }
        self.shared.unsynced.store(false, Ordering::Release);
        Ok(())
    }

    /// Writes everything back and empties the cache (before operations that rewrite the engine behind it).
    pub(super) fn forget_cache(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cache {
            if !c.is_empty() || c.has_dirty() {
                c.clear(&self.shared.db)?;
            }
        }
        self.shared.unsynced.store(false, Ordering::Release);
        Ok(())
    }
}
