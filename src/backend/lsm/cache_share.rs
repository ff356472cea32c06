//! The default capacity of the read-modify-write caches: on an engine environment with a memory budget, a
//! share of the budget divided among the LSM backends open on it (rebalanced as they open and close, as
//! RocksDB's write-buffer manager divides its limit); without a budget, a fixed size
//! (`design/rmw-cache.md`, "Default capacity").

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use keyed_state_lsm::{MemoryBudget, MemoryReservation};
use parking_lot::Mutex;

/// The share of a memory budget the read-modify-write caches of the backends on it take together, unless
/// [`StateEnvOptions::rmw_cache_ratio`](crate::env::StateEnvOptions::rmw_cache_ratio) says otherwise: 0, no
/// default cache (`design/rmw-cache.md`, "Default capacity": with the cache on, incremental checkpoints
/// upload its pending dirty entries again until they reach the engine). [`SUGGESTED_RMW_CACHE_RATIO`] turns
/// the caches on.
pub const DEFAULT_RMW_CACHE_RATIO: f64 = 0.0;

/// The share of a budget for read-modify-write caches that the design page argues for (a quarter: the
/// memtables take half, the caches as much as the block cache and SST metadata).
pub const SUGGESTED_RMW_CACHE_RATIO: f64 = 0.25;

/// A cache's footprint (what it charges the budget: capacity, doorkeeper, hash-table buckets) is at most
/// about 1.29 times its capacity; a member's capacity is this fraction of its part of the pool, so that its
/// footprint stays within that part.
const CAPACITY_PER_FOOTPRINT: (usize, usize) = (3, 4);

/// The bytes the caches of one budget's backends share, and how many backends share them.
#[derive(Debug)]
pub(crate) struct CacheShare {
    /// Bytes of footprint for all the caches together.
    pool: AtomicUsize,
    members: AtomicUsize,
    /// Bytes every cache on the budget charges now, default or not ([`CacheCharge`]).
    charged: AtomicUsize,
    /// Changes whenever the pool or the members change: a member compares it with the last it saw.
    generation: AtomicU64,
}

/// One backend's membership of a [`CacheShare`]; leaving (drop) gives its part back to the others.
#[derive(Debug)]
pub(crate) struct ShareMember {
    share: Arc<CacheShare>,
    seen: u64,
}

/// The shares of the budgets alive, found by the budget (a weak reference keeps its address from reuse).
static SHARES: Mutex<Vec<(Weak<MemoryBudget>, Arc<CacheShare>)>> = Mutex::new(Vec::new());

/// The share of `budget`, made with [`DEFAULT_RMW_CACHE_RATIO`] of it if it has none yet.
pub(crate) fn share_of(budget: &Arc<MemoryBudget>) -> Arc<CacheShare> {
    let mut shares = SHARES.lock();
    shares.retain(|(b, _)| b.strong_count() > 0);
    if let Some((_, s)) = shares
        .iter()
        .find(|(b, _)| std::ptr::eq(b.as_ptr(), Arc::as_ptr(budget)))
    {
        return Arc::clone(s);
    }
    let s = Arc::new(CacheShare {
        pool: AtomicUsize::new(pool_of(budget, DEFAULT_RMW_CACHE_RATIO)),
        members: AtomicUsize::new(0),
        charged: AtomicUsize::new(0),
        generation: AtomicU64::new(0),
    });
    shares.push((Arc::downgrade(budget), Arc::clone(&s)));
    s
}

/// Sets the share of `budget` the caches take together (`ratio` of its capacity; 0: no default cache).
pub(crate) fn set_ratio(budget: &Arc<MemoryBudget>, ratio: f64) {
    let s = share_of(budget);
    s.pool.store(pool_of(budget, ratio), Ordering::Relaxed);
    s.generation.fetch_add(1, Ordering::Relaxed);
}

/// Bytes the read-modify-write caches on `budget` charge it together (a part of its reservations).
pub(crate) fn charged_on(budget: &Arc<MemoryBudget>) -> usize {
    share_of(budget).charged.load(Ordering::Relaxed)
}

/// A cache's charge on its budget: a reservation, also counted among the budget's cache charges.
#[derive(Debug)]
pub(crate) struct CacheCharge {
    reservation: MemoryReservation,
    share: Arc<CacheShare>,
}

impl CacheCharge {
    pub(crate) fn new(budget: &Arc<MemoryBudget>, bytes: usize) -> CacheCharge {
        let share = share_of(budget);
        share.charged.fetch_add(bytes, Ordering::Relaxed);
        CacheCharge {
            reservation: budget.reserve(bytes),
            share,
        }
    }

    pub(crate) fn resize(&mut self, bytes: usize) {
        let old = self.reservation.bytes();
        self.share.charged.fetch_add(bytes, Ordering::Relaxed);
        self.share.charged.fetch_sub(old, Ordering::Relaxed);
        self.reservation.resize(bytes);
    }
}

impl Drop for CacheCharge {
    fn drop(&mut self) {
        self.share
            .charged
            .fetch_sub(self.reservation.bytes(), Ordering::Relaxed);
    }
}

fn pool_of(budget: &MemoryBudget, ratio: f64) -> usize {
    let capacity = budget.capacity().unwrap_or(0) as f64;
    (capacity * ratio.clamp(0.0, 1.0)) as usize
}

impl CacheShare {
    /// Joins: the share is divided among one more backend.
    pub(crate) fn join(self: &Arc<Self>) -> ShareMember {
        self.members.fetch_add(1, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Relaxed);
        ShareMember {
            share: Arc::clone(self),
            // Never a generation: the first look sizes the cache.
            seen: u64::MAX,
        }
    }
}

impl ShareMember {
    /// Whether the pool or the members changed since [`capacity`](Self::capacity) was last asked.
    #[inline]
    pub(crate) fn changed(&self) -> bool {
        self.share.generation.load(Ordering::Relaxed) != self.seen
    }

    /// This member's cache capacity now (its part of the pool, as capacity), and notes the generation seen.
    pub(crate) fn capacity(&mut self) -> usize {
        self.seen = self.share.generation.load(Ordering::Relaxed);
        let members = self.share.members.load(Ordering::Relaxed).max(1);
        let part = self.share.pool.load(Ordering::Relaxed) / members;
        part / CAPACITY_PER_FOOTPRINT.1 * CAPACITY_PER_FOOTPRINT.0
    }

    /// How many backends share the pool now.
    pub(crate) fn members(&self) -> usize {
        self.share.members.load(Ordering::Relaxed)
    }
}

impl Drop for ShareMember {
    fn drop(&mut self) {
        self.share.members.fetch_sub(1, Ordering::Relaxed);
        self.share.generation.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_divided_among_the_members_and_given_back_when_one_leaves() {
        let env = |bytes: usize| {
            keyed_state_lsm::SharedEnv::new(keyed_state_lsm::EnvOptions {
                memory_budget: Some(bytes),
                background_threads: 1,
                ..keyed_state_lsm::EnvOptions::default()
            })
            .unwrap()
        };
        let e = env(400 << 20);
        let budget = Arc::clone(e.memory());
        set_ratio(&budget, 0.25);
        let share = share_of(&budget);
        let mut a = share.join();
        assert!(a.changed());
        assert_eq!(a.capacity(), 75 << 20);
        assert!(!a.changed());
        let mut b = share.join();
        assert!(a.changed());
        assert_eq!(a.capacity(), (50 << 20) / 4 * 3);
        assert_eq!(b.capacity(), (50 << 20) / 4 * 3);
        drop(b);
        assert!(a.changed());
        assert_eq!(a.capacity(), 75 << 20);
        assert_eq!(a.members(), 1);
        // Another budget has its own share.
        let other = env(40 << 20);
        assert!(!Arc::ptr_eq(&share_of(other.memory()), &share));
    }
}
