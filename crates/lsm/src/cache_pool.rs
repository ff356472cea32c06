//! One capacity shared by an engine's block cache and its default row cache (an engine with a block cache
//! of its own: no environment, or one without a memory budget).
//!
//! Each cache is charged what it holds. Each may hold what the other leaves, and at least its guaranteed
//! share of the capacity when it wants it (the rows [`Options::row_cache_min_share`](crate::Options::row_cache_min_share),
//! the blocks the rest): a cache that grows past what the other leaves makes the other evict down to the
//! rest, but never below its share. So rows take the block cache's unused room when blocks are stored
//! raw and read from the map (incompressible values: the block cache then holds next to nothing), blocks
//! take the rows' unused room when no key is read twice, and together they never hold more than the
//! capacity (`Options::block_cache_size`; between an insert and the evictions it starts, by at most one
//! entry per concurrent insert). Why: `design/decisions/0008-row-cache.md`, "One capacity for an engine's own caches".

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::budget::LeftoverCache;

/// One side of the pool: what it holds, and the cache that evicts when the other side needs the room.
struct Side {
    held: AtomicUsize,
    cache: OnceLock<Weak<dyn LeftoverCache>>,
}

impl Side {
    fn new() -> Self {
        Side {
            held: AtomicUsize::new(0),
            cache: OnceLock::new(),
        }
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Asks the cache to evict down to its bound now.
    fn fit(&self) {
        if let Some(c) = self.cache.get().and_then(Weak::upgrade) {
            c.fit();
        }
    }
}

/// Which cache of the pool.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Part {
    Blocks,
    Rows,
}

/// The capacity a block cache and a row cache share.
pub(crate) struct CachePool {
    capacity: usize,
    /// The bytes the rows keep when they want them (the blocks keep the rest).
    rows_min: usize,
    blocks: Side,
    rows: Side,
}

impl CachePool {
    /// A pool of `capacity` bytes whose rows keep `rows_share` of it when they want it (the engine checks
    /// it is in [1/32, 1]; here it is clamped to [0, 1]).
    pub(crate) fn new(capacity: usize, rows_share: f64) -> Arc<Self> {
        let rows_min = (capacity as f64 * rows_share.clamp(0.0, 1.0)) as usize;
        Arc::new(CachePool {
            capacity,
            rows_min: rows_min.min(capacity),
            blocks: Side::new(),
            rows: Side::new(),
        })
    }

    fn side(&self, part: Part) -> (&Side, &Side) {
        match part {
            Part::Blocks => (&self.blocks, &self.rows),
            Part::Rows => (&self.rows, &self.blocks),
        }
    }

    /// The bytes both caches share.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes the rows keep when they want them: the least [`bound`](Self::bound) gives them.
    pub(crate) fn rows_min(&self) -> usize {
        self.rows_min
    }

    /// Connects `cache`, the pool's `part`, which [`grew`](Self::grew) asks to evict when the other part
    /// needs the room (a second call is ignored).
    pub(crate) fn connect(&self, part: Part, cache: Weak<dyn LeftoverCache>) {
        let _ = self.side(part).0.cache.set(cache);
    }

    /// The most `part` may hold now: what the other part leaves, and at least its guaranteed share.
    pub(crate) fn bound(&self, part: Part) -> usize {
        let share = match part {
            Part::Blocks => self.capacity - self.rows_min,
            Part::Rows => self.rows_min,
        };
        share.max(self.capacity.saturating_sub(self.side(part).1.held()))
    }

    /// What `part` holds.
    #[cfg(test)]
    pub(crate) fn held(&self, part: Part) -> usize {
        self.side(part).0.held()
    }

    /// `part` holds `bytes` more; if both now hold more than the capacity, the other part evicts down to
    /// its bound. Call it with no lock of either cache held.
    pub(crate) fn grew(&self, part: Part, bytes: usize) {
        let (mine, other) = self.side(part);
        let held = mine.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if held + other.held() > self.capacity {
            other.fit();
        }
    }

    /// `part` holds `bytes` less.
    pub(crate) fn shrank(&self, part: Part, bytes: usize) {
        self.side(part).0.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache that evicts down to its bound in the pool.
    struct Fake {
        pool: Arc<CachePool>,
        part: Part,
    }

    impl LeftoverCache for Fake {
        fn usage(&self) -> usize {
            self.pool.held(self.part)
        }
        fn fit(&self) {
            let over = self
                .pool
                .held(self.part)
                .saturating_sub(self.pool.bound(self.part));
            self.pool.shrank(self.part, over);
        }
    }

    #[test]
    fn each_part_holds_what_the_other_leaves_and_at_least_half_when_it_wants_it() {
        let pool = CachePool::new(100, 0.5);
        let caches: Vec<Arc<dyn LeftoverCache>> = [Part::Blocks, Part::Rows]
            .into_iter()
            .map(|part| {
                let c: Arc<dyn LeftoverCache> = Arc::new(Fake {
                    pool: Arc::clone(&pool),
                    part,
                });
                pool.connect(part, Arc::downgrade(&c));
                c
            })
            .collect();
        // Rows alone may take everything.
        assert_eq!(pool.bound(Part::Rows), 100);
        pool.grew(Part::Rows, 90);
        assert_eq!(pool.bound(Part::Blocks), 50);
        // Blocks that grow take the rows' room above their half back.
        pool.grew(Part::Blocks, 40);
        assert_eq!((pool.held(Part::Blocks), pool.held(Part::Rows)), (40, 60));
        pool.grew(Part::Blocks, 20);
        assert_eq!((pool.held(Part::Blocks), pool.held(Part::Rows)), (60, 50));
        // Rows at their half are not evicted for blocks: the blocks' bound is their half, to which the
        // blocks evict themselves (as a cache's insert does).
        assert_eq!(pool.bound(Part::Blocks), 50);
        assert_eq!(pool.bound(Part::Rows), 50);
        caches[0].fit();
        assert_eq!(pool.held(Part::Blocks) + pool.held(Part::Rows), 100);
        pool.shrank(Part::Blocks, 50);
        assert_eq!(pool.bound(Part::Rows), 100);
        drop(caches);
        // Without its caches the pool only counts.
        pool.grew(Part::Rows, 80);
        assert_eq!(pool.held(Part::Rows), 130);
    }
}
