//! The LSM backend's read-modify-write cache settings: capacity, admission, its charge on the memory budget,
//! and writing it back.

use super::LsmBackend;
use crate::backend::lsm_cache::RmwCache;
use crate::error::Result;

impl LsmBackend {
    /// Sets the capacity of the read-modify-write cache in bytes (`design/rmw-cache.md`): the allocations of
    /// keys and values too long to sit in an entry's slot, and a fixed per-entry overhead. 0 turns the cache off (its dirty entries are written back first); a
    /// smaller capacity evicts at once. The capacity (with the doorkeeper's table, 1/64 of it, and the hash table's buckets for the most entries
    /// the capacity holds, 1/8 to 1/4 of it) is reserved
    /// from the engine environment's memory budget ([`MemoryBudget::reserve`](keyed_state_lsm::MemoryBudget::reserve)):
    /// with a [`StateEnv`](crate::env::StateEnv) budget the cache lives inside it, shrinking the shared block
    /// cache, and the budget's breakdown counts it under `reserved`. A key the cache does not hold is taken
    /// in at once while the cache has room for it; once it is full, on its second miss within a while (a
    /// doorkeeper of about 1/64 of the capacity remembers the first), so that a key touched once costs what
    /// it costs without the cache ([`set_rmw_cache_admission`](Self::set_rmw_cache_admission)).
    pub fn set_rmw_cache_capacity(&mut self, capacity: usize) -> Result<()> {
        let db = &self.shared.db;
        match (&mut self.cache, capacity) {
            (Some(c), 0) => {
                c.clear(db)?;
                self.cache = None;
            }
            (Some(c), n) => {
                c.set_capacity(n);
                c.evict(None, db)?;
            }
            (None, 0) => {}
            (None, n) => self.cache = Some(RmwCache::new(n, false)),
        }
        self.charge_cache();
        Ok(())
    }

    /// Makes the cache's charge on the memory budget its footprint (none without a cache).
    pub(super) fn charge_cache(&mut self) {
        match (&self.cache, &mut self.cache_charge) {
            (None, charge) => *charge = None,
            (Some(c), Some(r)) => r.resize(c.footprint()),
            (Some(c), charge @ None) => {
                *charge = Some(self.shared.db.env().memory().reserve(c.footprint()))
            }
        }
    }

    /// `true`: the cache takes every key in on its first miss, full or not, without the doorkeeper (tests
    /// use it to send every write through the cache). Writes back and starts a new, empty cache of the same
    /// capacity.
    pub fn set_rmw_cache_admission(&mut self, first_touch: bool) -> Result<()> {
        if let Some(c) = &mut self.cache {
            if c.admits_on_first_touch() != first_touch {
                c.clear(&self.shared.db)?;
                self.cache = Some(RmwCache::new(c.capacity(), first_touch));
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
        match &mut self.cache {
            Some(c) if c.has_dirty() => c.write_back_all(&self.shared.db),
            _ => Ok(()),
        }
    }

    /// Writes everything back and empties the cache (before operations that rewrite the engine behind it).
    pub(super) fn forget_cache(&mut self) -> Result<()> {
        match &mut self.cache {
            Some(c) if !c.is_empty() || c.has_dirty() => c.clear(&self.shared.db),
            _ => Ok(()),
        }
    }
}
