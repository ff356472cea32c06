//! The block cache: decompressed SST blocks keyed by `(file_number, block_offset)`, bounded in bytes.
//!
//! The cache is split into shards, each behind its own mutex, each bounded by `capacity / SHARDS` bytes, so
//! the total never exceeds the capacity. Eviction is CLOCK (second chance, [`ClockShard`]): a hit only sets
//! a reference bit in the map entry that holds the block, so the hot path is one hash probe (no second
//! indirection) and one reference-count increment under a short lock. The clock hand walks a ring of keys in
//! insertion order.
//! A block larger than a shard is returned to the caller but not cached. Blocks are `Arc<Vec<u8>>`: an evicted
//! block nobody else holds goes to its shard's small spare list, and the next decompression into that shard
//! reuses it ([`BlockCache::take_buffer`]), so steady-state misses neither allocate nor free 4 KiB buffers
//! (whose glibc `malloc` paid for `malloc_consolidate` in profiles). File numbers are never reused, so
//! stale entries of deleted files are simply evicted over time (or dropped at once with
//! [`BlockCache::erase_file`]).
//!
//! A cache made for an environment's memory budget ([`BlockCache::with_budget`]) is shared by its engines:
//! its capacity is what memtables, SST metadata, reservations and row caches leave of the budget, read at
//! every insert, and [`BlockCache::fit`] evicts down to it when they grow. Its engines' file numbers are told apart by an
//! owner tag ([`BlockCache::new_owner`], [`file_key`]).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::budget::{LeftoverCache, MemoryBudget};
use crate::cache_pool::{CachePool, Part};
use crate::clock::ClockShard;

/// Number of shards (a power of two).
const SHARDS: usize = 16;
/// Bookkeeping bytes charged per cached block on top of its length.
const ENTRY_OVERHEAD: usize = 64;
/// Recycled buffers kept per shard (outside the byte bound; at most this many blocks' worth).
const SPARE_PER_SHARD: usize = 4;

type Key = (u64, u64);

#[derive(Default)]
struct Shard {
    clock: ClockShard<Key, Arc<Vec<u8>>>,
    /// Buffers of evicted blocks, for reuse by the next decompression.
    spare: Vec<Vec<u8>>,
}

impl Shard {
    #[inline]
    fn get(&mut self, key: &Key) -> Option<Arc<Vec<u8>>> {
        self.clock.get(key).map(Arc::clone)
    }

    /// Evicts blocks until the shard is within `capacity`.
    fn fit(&mut self, capacity: usize) {
        let spare = &mut self.spare;
        self.clock.fit(capacity, &mut |b| recycle(spare, b));
    }

    fn insert(&mut self, key: Key, block: Arc<Vec<u8>>, charge: usize, capacity: usize) {
        let spare = &mut self.spare;
        self.clock
            .insert(key, block, charge, capacity, &mut |b| recycle(spare, b));
    }
}

/// Keeps the buffer of an evicted block if nobody else holds it and the spare list has room.
fn recycle(spare: &mut Vec<Vec<u8>>, block: Arc<Vec<u8>>) {
    if spare.len() < SPARE_PER_SHARD {
        if let Ok(buf) = Arc::try_unwrap(block) {
            spare.push(buf);
        }
    }
}

/// Bits of a cache key's file part that hold the file number; the owner tag is above them.
const FILE_NUMBER_BITS: u32 = 40;

/// The cache key of file `number` of the engine tagged `owner` ([`BlockCache::new_owner`]). The first
/// owner's tag is 0, so a cache of one engine keys blocks by file number alone.
pub(crate) fn file_key(owner: u64, number: u64) -> u64 {
    (owner << FILE_NUMBER_BITS) ^ number
}

/// A sharded, byte-bounded cache of decompressed blocks.
pub struct BlockCache {
    shards: Box<[Mutex<Shard>]>,
    /// Each shard's bound in a cache of a fixed capacity (read only without a budget and a pool; 0 in a
    /// pooled cache).
    shard_capacity: usize,
    /// The budget whose leftover is the capacity (None: the fixed `shard_capacity`, or the pool's).
    budget: Option<Arc<MemoryBudget>>,
    /// The capacity shared with the engine's row cache, if any ([`BlockCache::pooled`]).
    pool: Option<Arc<CachePool>>,
    /// The next owner tag.
    owners: std::sync::atomic::AtomicU64,
}

impl BlockCache {
    /// A cache holding at most `capacity_bytes` (block bytes plus a small per-block overhead).
    pub fn new(capacity_bytes: usize) -> Arc<Self> {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        Arc::new(BlockCache {
            shards,
            shard_capacity: capacity_bytes / SHARDS,
            budget: None,
            pool: None,
            owners: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// A cache of an engine's own sharing `pool` with its row cache (`crate::cache_pool`): it holds at most
    /// what the pool leaves it, and evicts when the row cache needs the room.
    pub(crate) fn pooled(pool: Arc<CachePool>) -> Arc<Self> {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        let cache = Arc::new(BlockCache {
            shards,
            shard_capacity: 0,
            budget: None,
            pool: Some(Arc::clone(&pool)),
            owners: std::sync::atomic::AtomicU64::new(0),
        });
        let weak: std::sync::Weak<dyn LeftoverCache> = Arc::downgrade(&cache) as _;
        pool.connect(Part::Blocks, weak);
        cache
    }

    /// The capacity the cache shares with its engine's row cache, if it is [`pooled`](Self::pooled).
    pub(crate) fn pool(&self) -> Option<&Arc<CachePool>> {
        self.pool.as_ref()
    }

    /// Runs `change` on `shard` under its lock, then tells the pool (if any) how the shard's usage moved
    /// (with no lock held: a growth may make the row cache evict).
    fn change_shard(&self, shard: &Mutex<Shard>, change: impl FnOnce(&mut Shard)) {
        let (before, after) = {
            let mut s = shard.lock();
            let before = s.clock.usage();
            change(&mut s);
            (before, s.clock.usage())
        };
        if let Some(p) = &self.pool {
            if after > before {
                p.grew(Part::Blocks, after - before);
            } else if before > after {
                p.shrank(Part::Blocks, before - after);
            }
        }
    }

    /// A cache holding what `budget` leaves (see the module documentation), connected to it.
    pub(crate) fn with_budget(budget: Arc<MemoryBudget>) -> Arc<Self> {
        let shards = (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect();
        let cache = Arc::new(BlockCache {
            shards,
            shard_capacity: budget.capacity().unwrap_or(0) / SHARDS,
            budget: Some(Arc::clone(&budget)),
            pool: None,
            owners: std::sync::atomic::AtomicU64::new(0),
        });
        let leftover: Arc<dyn LeftoverCache> = Arc::clone(&cache) as Arc<dyn LeftoverCache>;
        budget.set_cache(&leftover);
        cache
    }

    /// A tag for a new engine using the cache, for [`file_key`].
    pub(crate) fn new_owner(&self) -> u64 {
        self.owners
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The budget the cache takes its capacity from, if any.
    pub(crate) fn budget(&self) -> Option<&Arc<MemoryBudget>> {
        self.budget.as_ref()
    }

    /// The bound of one shard now.
    #[inline]
    fn shard_capacity(&self) -> usize {
        match (&self.budget, &self.pool) {
            (Some(b), _) => b.cache_capacity().min(usize::MAX / 2) / SHARDS,
            (None, Some(p)) => p.bound(Part::Blocks) / SHARDS,
            (None, None) => self.shard_capacity,
        }
    }

    /// The byte bound now (rounded down to a multiple of the shard count): the one the cache was created
    /// with, what its budget leaves, or in a pooled cache (`BlockCache::pooled`) what the pool leaves the
    /// blocks (at least the pool's capacity less the rows' guaranteed share). A metadata buffer too large for a shard of this bound
    /// is kept in its file's slot instead (`MetadataPlacement::Cached`), and stays there when the bound
    /// grows again; in a pooled cache, which has no budget, such a buffer is charged to neither cache.
    pub fn capacity(&self) -> usize {
        self.shard_capacity() * SHARDS
    }

    /// Evicts blocks until every shard is within its bound (after the budget's other charges grew).
    pub fn fit(&self) {
        let cap = self.shard_capacity();
        for shard in self.shards.iter() {
            self.change_shard(shard, |s| s.fit(cap));
        }
    }

    /// Bytes currently charged (never above [`BlockCache::capacity`] for a fixed capacity; with a budget, above
    /// it only until the next [`fit`](Self::fit) or insert after the others grew).
    pub fn usage(&self) -> usize {
        self.shards.iter().map(|s| s.lock().clock.usage()).sum()
    }

    #[inline]
    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        // Block offsets are multiples of nothing in particular; a multiplicative mix of both halves spreads
        // them (the top bits of the product pick the shard).
        let h = (key.1 ^ key.0.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        &self.shards[(h >> 60) as usize & (SHARDS - 1)]
    }

    /// The cached block at `offset` in file `file_number`, if present.
    #[inline]
    pub fn get(&self, file_number: u64, offset: u64) -> Option<Arc<Vec<u8>>> {
        let key = (file_number, offset);
        self.shard(&key).lock().get(&key)
    }

    /// Whether the block at `offset` in file `file_number` is cached (its reference bit is left alone).
    #[inline]
    pub fn contains(&self, file_number: u64, offset: u64) -> bool {
        let key = (file_number, offset);
        self.shard(&key).lock().clock.peek(&key).is_some()
    }

    /// A buffer to decompress the block at (`file_number`, `offset`) into: a recycled one of at least
    /// `len_hint` bytes' capacity from the block's shard if there is one (still holding the evicted block's
    /// bytes, so that the caller overwrites them instead of zeroing first), else a new vector without capacity
    /// (the caller allocates once it has checked the length).
    pub fn take_buffer(&self, file_number: u64, offset: u64, len_hint: usize) -> Vec<u8> {
        let key = (file_number, offset);
        let mut s = self.shard(&key).lock();
        match s.spare.iter().rposition(|b| b.capacity() >= len_hint) {
            Some(i) => s.spare.swap_remove(i),
            None => Vec::new(),
        }
    }

    /// Caches a block (evicting others as needed); blocks larger than a shard's bound are not cached. The
    /// charge is the block's length plus a fixed overhead, as before buffers were recycled; the spare capacity
    /// of a buffer (decompression rounds capacities up to a multiple of 512 bytes so recycled buffers fit
    /// other blocks: at most 511 bytes, for 4 KiB blocks about 1.6 % on average) is not charged.
    pub fn insert(&self, file_number: u64, offset: u64, block: Arc<Vec<u8>>) {
        let charge = block.len() + ENTRY_OVERHEAD;
        let cap = self.shard_capacity();
        if charge > cap {
            return;
        }
        let key = (file_number, offset);
        self.change_shard(self.shard(&key), |s| s.insert(key, block, charge, cap));
    }

    /// Drops every cached block of `file_number` (e.g. after the file is deleted).
    pub fn erase_file(&self, file_number: u64) {
        for shard in self.shards.iter() {
            self.change_shard(shard, |s| s.clock.retain(|k, _| k.0 != file_number));
        }
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity())
            .field("usage", &self.usage())
            .finish()
    }
}

impl LeftoverCache for BlockCache {
    fn usage(&self) -> usize {
        BlockCache::usage(self)
    }

    fn fit(&self) {
        BlockCache::fit(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_hits() {
        let cache = BlockCache::new(64 * 1024);
        for i in 0..1000u64 {
            cache.insert(1, i * 4096, Arc::new(vec![i as u8; 1000]));
            assert!(cache.usage() <= cache.capacity());
        }
        let last = cache.get(1, 999 * 4096).unwrap();
        assert_eq!(last[0], (999 % 256) as u8);
        assert!(cache.get(1, 0).is_none());
        cache.insert(2, 0, Arc::new(vec![0u8; 1 << 20]));
        assert!(cache.get(2, 0).is_none());
        cache.erase_file(1);
        assert_eq!(cache.usage(), 0);
    }

    #[test]
    fn clock_keeps_referenced_blocks_and_replaces_in_place() {
        // One shard's worth of room for 4 blocks of 1000 bytes (+ overhead) per shard.
        let cache = BlockCache::new(SHARDS * 4 * (1000 + ENTRY_OVERHEAD));
        let block = |b: u8| -> Arc<Vec<u8>> { Arc::new(vec![b; 1000]) };
        // Fill file 7 heavily; keep touching offset 0 so it always has its reference bit set.
        for i in 0..2000u64 {
            cache.insert(7, i * 4096, block(i as u8));
            assert!(cache.get(7, 0).is_some(), "hot block evicted at {i}");
            assert!(cache.usage() <= cache.capacity());
        }
        // Replacing a key keeps one entry and charges the new length.
        let before = cache.usage();
        cache.insert(7, 0, Arc::new(vec![9u8; 500]));
        assert_eq!(cache.usage(), before - 500);
        assert_eq!(cache.get(7, 0).map(|b| b.len()), Some(500));
        cache.erase_file(7);
        assert_eq!(cache.usage(), 0);
        assert!(cache.get(7, 0).is_none());
        // Erased keys can be cached again.
        cache.insert(7, 0, block(1));
        assert_eq!(cache.get(7, 0).map(|b| b[0]), Some(1));
    }

    #[test]
    fn evicted_buffers_are_recycled() {
        let cache = BlockCache::new(SHARDS * 2 * (1024 + ENTRY_OVERHEAD));
        let mut recycled = 0;
        for i in 0..400u64 {
            let mut buf = cache.take_buffer(3, i * 4096, 1000);
            if buf.capacity() >= 1000 {
                recycled += 1;
            }
            // A recycled buffer still holds the evicted block (the decompressor overwrites it).
            buf.clear();
            buf.reserve_exact(1024);
            buf.resize(1000, i as u8);
            cache.insert(3, i * 4096, Arc::new(buf));
            assert!(cache.usage() <= cache.capacity());
        }
        // Once the shards are full (two blocks each), nearly every insert evicts and so feeds the next take.
        assert!(recycled > 300, "{recycled} of 400 buffers recycled");
        // A block still held by a reader is not recycled (its bytes stay valid).
        let held = cache.get(3, 399 * 4096).unwrap();
        for i in 400..600u64 {
            let mut buf = cache.take_buffer(3, i * 4096, 1000);
            buf.clear();
            buf.resize(1000, 0xAB);
            cache.insert(3, i * 4096, Arc::new(buf));
        }
        assert!(held.iter().all(|&b| b == (399 % 256) as u8));
    }
}
