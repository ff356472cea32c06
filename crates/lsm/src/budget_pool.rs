//! A part of a memory budget that caches kept above the engines share (caches of the engines' users, such as
//! a state store's read-modify-write caches): a pool of bytes divided equally among the members that join it
//! and re-divided as they join and leave, as the write-buffer manager divides its share among memtables; and
//! what those caches charge the budget. One per [`MemoryBudget`](crate::MemoryBudget)
//! ([`MemoryBudget::user_caches`](crate::MemoryBudget::user_caches)); its size is the user's to set (0 at
//! first).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The pool (see the module documentation). Shared through an `Arc`.
#[derive(Debug, Default)]
pub struct CachePool {
    /// Bytes for all the members together.
    bytes: AtomicUsize,
    members: AtomicUsize,
    /// Bytes the caches' charges hold now ([`CachePool::note_charge`]), members' or not.
    charged: AtomicUsize,
    /// Changes whenever the bytes or the members change: a member compares it with the last it saw.
    generation: AtomicU64,
}

impl CachePool {
    /// Sets the pool's size in bytes (0: none); members see the change at their next
    /// [`PoolMember::changed`].
    pub fn set_bytes(&self, bytes: usize) {
        self.bytes.store(bytes, Ordering::Relaxed);
        // Release: a member that sees the new generation (Acquire) sees the size and count behind it.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The pool's size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// How many members divide the pool now.
    pub fn members(&self) -> usize {
        self.members.load(Ordering::Relaxed)
    }

    /// Bytes the caches' charges on the budget hold now, as counted by [`note_charge`](Self::note_charge).
    pub fn charged(&self) -> usize {
        self.charged.load(Ordering::Relaxed)
    }

    /// Joins: the pool is divided among one more member until the returned membership is dropped.
    pub fn join(self: &Arc<Self>) -> PoolMember {
        self.members.fetch_add(1, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
        PoolMember {
            pool: Arc::clone(self),
            // Never a generation: the first look sizes the member.
            seen: u64::MAX,
        }
    }

    /// Counts a cache's charge on the budget (its reservation) going from `from` to `to` bytes, among the
    /// pool's [`charged`](Self::charged) bytes.
    pub fn note_charge(&self, from: usize, to: usize) {
        self.charged.fetch_add(to, Ordering::Relaxed);
        self.charged.fetch_sub(from, Ordering::Relaxed);
    }
}

/// One member's place in a [`CachePool`]; dropping it gives its part back to the others.
#[derive(Debug)]
pub struct PoolMember {
    pool: Arc<CachePool>,
    seen: u64,
}

impl PoolMember {
    /// Whether the pool's size or its members changed since [`part`](Self::part) was last asked.
    #[inline]
    pub fn changed(&self) -> bool {
        self.pool.generation.load(Ordering::Acquire) != self.seen
    }

    /// This member's part of the pool in bytes now, and notes the generation seen.
    pub fn part(&mut self) -> usize {
        self.seen = self.pool.generation.load(Ordering::Acquire);
        self.pool.bytes() / self.pool.members().max(1)
    }

    /// How many members divide the pool now.
    pub fn members(&self) -> usize {
        self.pool.members()
    }
}

impl Drop for PoolMember {
    fn drop(&mut self) {
        self.pool.members.fetch_sub(1, Ordering::Relaxed);
        self.pool.generation.fetch_add(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(bytes: usize) -> crate::SharedEnv {
        crate::SharedEnv::new(crate::EnvOptions {
            memory_budget: Some(bytes),
            background_threads: 1,
            ..crate::EnvOptions::default()
        })
        .unwrap()
    }

    #[test]
    fn the_pool_is_divided_among_the_members_and_given_back_when_one_leaves() {
        let e = env(400 << 20);
        let pool = Arc::clone(e.memory().user_caches());
        assert_eq!(pool.bytes(), 0, "empty until its user sizes it");
        pool.set_bytes(100 << 20);
        let mut a = pool.join();
        assert!(a.changed());
        assert_eq!(a.part(), 100 << 20);
        assert!(!a.changed());
        let mut b = pool.join();
        assert!(a.changed());
        assert_eq!((a.part(), b.part()), (50 << 20, 50 << 20));
        drop(b);
        assert!(a.changed());
        assert_eq!(a.part(), 100 << 20);
        assert_eq!(a.members(), 1);
        pool.set_bytes(0);
        assert!(a.changed());
        assert_eq!(a.part(), 0);
        // Another budget has its own pool.
        let other = env(40 << 20);
        assert!(!Arc::ptr_eq(other.memory().user_caches(), &pool));
    }

    #[test]
    fn charges_are_counted_until_given_back() {
        let pool = CachePool::default();
        pool.note_charge(0, 3 << 20);
        pool.note_charge(0, 1 << 20);
        pool.note_charge(3 << 20, 2 << 20);
        assert_eq!(pool.charged(), 3 << 20);
        pool.note_charge(2 << 20, 0);
        pool.note_charge(1 << 20, 0);
        assert_eq!(pool.charged(), 0);
    }
}
