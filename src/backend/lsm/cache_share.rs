//! The default capacity of the read-modify-write caches: on an engine environment with a memory budget, a
//! share of the budget divided among the LSM backends open on it (rebalanced as they open and close, as
//! RocksDB's write-buffer manager divides its limit), kept in the budget's pool for caches above the engines
//! ([`MemoryBudget::user_caches`]); without a budget, none (`design/rmw-cache.md`, "Default capacity").

use std::sync::Arc;

use keyed_state_lsm::{CachePool, MemoryBudget, MemoryReservation, PoolMember};

/// The share of a memory budget the read-modify-write caches of the backends on it take together, unless
/// [`StateEnvOptions::rmw_cache_ratio`](crate::env::StateEnvOptions::rmw_cache_ratio) says otherwise: 0, no
/// default cache (`design/rmw-cache.md`, "Why off by default": with a cache too small for them, list appends
/// and new map entries run slower than without one). [`SUGGESTED_RMW_CACHE_RATIO`] turns the caches on.
pub const DEFAULT_RMW_CACHE_RATIO: f64 = 0.0;

/// The share of a budget for read-modify-write caches that the design page argues for (a quarter: the
/// memtables take half, the caches as much as the block cache and SST metadata).
pub const SUGGESTED_RMW_CACHE_RATIO: f64 = 0.25;

/// A cache's footprint (what it charges the budget: capacity, doorkeeper, hash-table buckets) is at most
/// about 1.22 times its capacity; a member's capacity is this fraction of its part of the pool, so that its
/// footprint stays within that part.
const CAPACITY_PER_FOOTPRINT: (usize, usize) = (3, 4);

/// Sets the share of `budget` the caches take together (`ratio` of its capacity; 0: no default cache).
pub(crate) fn set_ratio(budget: &MemoryBudget, ratio: f64) {
    let capacity = budget.capacity().unwrap_or(0) as f64;
    budget
        .user_caches()
        .set_bytes((capacity * ratio.clamp(0.0, 1.0)) as usize);
}

/// Bytes the read-modify-write caches on `budget` charge it together (a part of its reservations).
pub(crate) fn charged_on(budget: &MemoryBudget) -> usize {
    budget.user_caches().charged()
}

/// A backend's place in its budget's pool for caches: its cache's capacity follows its part.
#[derive(Debug)]
pub(crate) struct ShareMember(PoolMember);

impl ShareMember {
    /// Joins the pool of `budget`.
    pub(crate) fn join(budget: &MemoryBudget) -> ShareMember {
        ShareMember(budget.user_caches().join())
    }

    /// Whether the pool or its members changed since [`capacity`](Self::capacity) was last asked.
    #[inline]
    pub(crate) fn changed(&self) -> bool {
        self.0.changed()
    }

    /// This backend's cache capacity now (its part of the pool, as capacity).
    pub(crate) fn capacity(&mut self) -> usize {
        self.0.part() / CAPACITY_PER_FOOTPRINT.1 * CAPACITY_PER_FOOTPRINT.0
    }

    /// How many backends share the pool now.
    pub(crate) fn members(&self) -> usize {
        self.0.members()
    }
}

/// A cache's charge on its budget: a reservation, also counted in the budget's pool for caches.
#[derive(Debug)]
pub(crate) struct CacheCharge {
    reservation: MemoryReservation,
    pool: Arc<CachePool>,
}

impl CacheCharge {
    pub(crate) fn new(budget: &Arc<MemoryBudget>, bytes: usize) -> CacheCharge {
        let pool = Arc::clone(budget.user_caches());
        pool.note_charge(0, bytes);
        CacheCharge {
            reservation: budget.reserve(bytes),
            pool,
        }
    }

    pub(crate) fn resize(&mut self, bytes: usize) {
        self.pool.note_charge(self.reservation.bytes(), bytes);
        self.reservation.resize(bytes);
    }
}

impl Drop for CacheCharge {
    fn drop(&mut self) {
        self.pool.note_charge(self.reservation.bytes(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_capacity_keeps_its_footprint_within_its_part_of_the_ratio() {
        let e = keyed_state_lsm::SharedEnv::new(keyed_state_lsm::EnvOptions {
            memory_budget: Some(400 << 20),
            background_threads: 1,
            ..keyed_state_lsm::EnvOptions::default()
        })
        .unwrap();
        let budget = Arc::clone(e.memory());
        set_ratio(&budget, 0.25);
        let mut a = ShareMember::join(&budget);
        assert_eq!(a.capacity(), 75 << 20);
        let mut b = ShareMember::join(&budget);
        assert!(a.changed());
        assert_eq!(a.capacity(), (50 << 20) / 4 * 3);
        assert_eq!(b.capacity(), (50 << 20) / 4 * 3);
        drop(b);
        assert_eq!(a.capacity(), 75 << 20);
        let c = CacheCharge::new(&budget, 1 << 20);
        assert_eq!(charged_on(&budget), 1 << 20);
        drop(c);
        assert_eq!(charged_on(&budget), 0);
    }
}
