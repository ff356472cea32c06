//! [`RocksDbShared`]: one block cache and one write-buffer manager for any number of
//! [`RocksDbBackend`](super::RocksDbBackend)s, sized from one memory budget the way Flink sizes them from a
//! slot's managed memory (`RocksDBMemoryControllerUtils`, `RocksDBSharedResources`).

use std::fmt;
use std::sync::Arc;

use rocksdb::{Cache, WriteBufferManager};

use crate::error::{Error, Result};

/// Flink's default share of the budget for memtables (`state.backend.rocksdb.memory.write-buffer-ratio`).
pub const FLINK_WRITE_BUFFER_RATIO: f64 = 0.5;

/// Memory shared by RocksDB backends, as Flink's managed memory configures it: one LRU block cache and one
/// `WriteBufferManager` that charges every memtable to that cache, both sized from one budget.
///
/// From a budget `B` and a write-buffer ratio `r` (Flink's formulas, which assume the write-buffer manager
/// may overshoot its limit by half before it flushes):
/// * the cache holds `(3 - r) × B / 3` bytes;
/// * the write-buffer manager's limit is `2 × r × B / 3`; its memtables are charged to the cache (dummy
///   entries), so memtables and cached blocks together stay near the cache's capacity.
///
/// Backends opened with it ([`RocksDbOptions::shared`](super::RocksDbOptions::shared)) also cache index
/// and filter blocks in that cache with high priority and pin the top-level index and filter
/// (Flink's `RocksDBResourceContainer` with managed memory), so that those blocks are charged too.
///
/// One difference from Flink: RocksDB's C API (all the `rocksdb` crate reaches) cannot set the cache's
/// high-priority pool ratio, so it stays at RocksDB's default (0.5) instead of Flink's 0.1.
///
/// Clones share the cache and the manager; two values are equal when they share them.
#[derive(Clone)]
pub struct RocksDbShared(Arc<Inner>);

struct Inner {
    cache: Cache,
    write_buffers: WriteBufferManager,
    budget: usize,
    write_buffer_ratio: f64,
    cache_capacity: usize,
    write_buffer_limit: usize,
}

impl RocksDbShared {
    /// Shared memory of `budget` bytes with Flink's default write-buffer ratio (0.5).
    pub fn new(budget: usize) -> Result<RocksDbShared> {
        Self::with_write_buffer_ratio(budget, FLINK_WRITE_BUFFER_RATIO)
    }

    /// Shared memory of `budget` bytes of which the share `write_buffer_ratio`, in `(0, 1]`, is for
    /// memtables (see the type's documentation for how the two are sized).
    pub fn with_write_buffer_ratio(
        budget: usize,
        write_buffer_ratio: f64,
    ) -> Result<RocksDbShared> {
        if budget == 0 {
            return Err(Error::InvalidArgument(
                "RocksDB shared memory: the budget must be above 0 bytes".into(),
            ));
        }
        if !(write_buffer_ratio > 0.0 && write_buffer_ratio <= 1.0) {
            return Err(Error::InvalidArgument(format!(
                "RocksDB shared memory: write-buffer ratio {write_buffer_ratio} is not in (0, 1]"
            )));
        }
        let b = budget as f64;
        let cache_capacity = ((3.0 - write_buffer_ratio) * b / 3.0) as usize;
        let write_buffer_limit = (2.0 * b * write_buffer_ratio / 3.0) as usize;
        let cache = Cache::new_lru_cache(cache_capacity);
        let write_buffers = WriteBufferManager::new_write_buffer_manager_with_cache(
            write_buffer_limit,
            false,
            cache.clone(),
        );
        Ok(RocksDbShared(Arc::new(Inner {
            cache,
            write_buffers,
            budget,
            write_buffer_ratio,
            cache_capacity,
            write_buffer_limit,
        })))
    }

    /// The budget it was sized from.
    pub fn budget(&self) -> usize {
        self.0.budget
    }

    /// The share of the budget for memtables.
    pub fn write_buffer_ratio(&self) -> f64 {
        self.0.write_buffer_ratio
    }

    /// The block cache's capacity: `(3 - r) × budget / 3`.
    pub fn cache_capacity(&self) -> usize {
        self.0.cache_capacity
    }

    /// The write-buffer manager's limit: `2 × r × budget / 3`.
    pub fn write_buffer_limit(&self) -> usize {
        self.0.write_buffer_limit
    }

    /// Bytes the cache holds, memtables' dummy entries included (`rocksdb.block-cache-usage`).
    pub fn cache_usage(&self) -> usize {
        self.0.cache.get_usage()
    }

    /// Bytes of the cache pinned by readers (`rocksdb.block-cache-pinned-usage`).
    pub fn cache_pinned_usage(&self) -> usize {
        self.0.cache.get_pinned_usage()
    }

    /// Bytes of memtables the write-buffer manager counts.
    pub fn write_buffer_usage(&self) -> usize {
        self.0.write_buffers.get_usage()
    }

    /// The figures under RocksDB's names (`rocksdb.block-cache-usage`, `rocksdb.block-cache-pinned-usage`,
    /// `rocksdb.block-cache-capacity`) and in their style (`keyed-state.rocksdb.write-buffer-manager-usage`,
    /// `keyed-state.rocksdb.write-buffer-manager-limit`, `keyed-state.rocksdb.memory-budget`).
    pub fn metrics(&self) -> Vec<keyed_state_lsm::Metric> {
        [
            ("rocksdb.block-cache-usage", self.cache_usage()),
            (
                "rocksdb.block-cache-pinned-usage",
                self.cache_pinned_usage(),
            ),
            ("rocksdb.block-cache-capacity", self.cache_capacity()),
            (
                "keyed-state.rocksdb.write-buffer-manager-usage",
                self.write_buffer_usage(),
            ),
            (
                "keyed-state.rocksdb.write-buffer-manager-limit",
                self.write_buffer_limit(),
            ),
            ("keyed-state.rocksdb.memory-budget", self.budget()),
        ]
        .into_iter()
        .map(|(name, value)| keyed_state_lsm::Metric {
            name: name.into(),
            value: value as u64,
        })
        .collect()
    }

    pub(super) fn cache(&self) -> &Cache {
        &self.0.cache
    }

    pub(super) fn write_buffer_manager(&self) -> &WriteBufferManager {
        &self.0.write_buffers
    }
}

impl PartialEq for RocksDbShared {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for RocksDbShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbShared")
            .field("budget", &self.0.budget)
            .field("write_buffer_ratio", &self.0.write_buffer_ratio)
            .field("cache_capacity", &self.0.cache_capacity)
            .field("write_buffer_limit", &self.0.write_buffer_limit)
            .finish()
    }
}
