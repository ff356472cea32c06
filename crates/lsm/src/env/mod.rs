//! The environment engines share: a memory budget, a block cache and a pool of background threads.
//!
//! A [`SharedEnv`] is made once per process (or per slot of a stream processor) and given to every engine
//! through [`Options::env`](crate::Options::env). It holds:
//!
//! * the **memory budget** (`budget`): memtables of every engine charge one write-buffer manager
//!   (`write_buffer`) whose limit is a share of the budget; when they reach 7/8 of it the largest memtable of
//!   any engine is switched out and flushed, and writers stall only when flushes cannot keep up. SST metadata
//!   held outside the cache and reservations of the engines' users ([`MemoryBudget::reserve`]) are charged
//!   too, and so is the environment's one row cache (what it holds, at most [`EnvOptions::row_cache_ratio`]
//!   of the budget; its engines' rows keyed by their owner tags); one block cache shared by the engines
//!   holds what all of these leave;
//! * the **background pool** (`pool`): a fixed number of threads running every engine's flushes and
//!   compactions, flushes first, engines taking turns.
//!
//! An engine opened without an environment gets a private one sized as its options say (two threads, a
//! flush always able to run beside a compaction; no memory limit), which is the behaviour of an engine
//! on its own, with its own block cache of [`Options::block_cache_size`](crate::Options::block_cache_size).
//! See `design/shared-env.md`.

pub(crate) mod pool;
pub(crate) mod write_buffer;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use self::pool::{Pool, PoolConfig, PoolShared};
use self::write_buffer::WriteBuffers;
pub use crate::budget::{MemoryBudget, MemoryReservation, RoomListener};
use crate::cache::BlockCache;
use crate::row_cache::RowCache;
use crate::LsmError;

/// The default share of a memory budget the environment's row cache may hold ([`EnvOptions::row_cache_ratio`]):
/// 1/16, 32 MiB of 512 MiB (`design/decisions/0008-row-cache.md`).
pub const DEFAULT_ROW_CACHE_RATIO: f64 = 1.0 / 16.0;

/// How a [`SharedEnv`] is sized.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// The memory budget of every engine opened with the environment, in bytes: their memtables (arena and
    /// point index), one shared block cache, SST metadata held outside it and reservations (default `None`:
    /// no budget; each engine's memtables and block cache are bounded by its own options).
    pub memory_budget: Option<usize>,
    /// The share of the budget memtables may take, in `(0, 1]` (default 0.5, as Flink's
    /// `state.backend.rocksdb.memory.write-buffer-ratio`).
    pub write_buffer_ratio: f64,
    /// The share of the budget the environment's row cache may hold, in `[0, 1)` (default
    /// [`DEFAULT_ROW_CACHE_RATIO`]; 0: none). With a budget, the engines that keep the default
    /// [`Options::row_cache_size`](crate::Options::row_cache_size) share this one row cache, which charges
    /// the budget what it holds (its doorkeeper and entries; the block cache gets what is left). Without a
    /// budget each engine has its own block cache and its own row cache.
    pub row_cache_ratio: f64,
    /// Threads running the flushes and compactions of every engine (default: the machine's cores, at least 2
    /// and at most 4). With two or more, one is always free for a flush.
    pub background_threads: usize,
    /// Nice increment of the background threads (Linux; default 5; see
    /// [`Options::background_nice`](crate::Options::background_nice)).
    pub background_nice: i32,
    /// Whether the background threads run under `SCHED_BATCH` (Linux; default true; see
    /// [`Options::background_batch_policy`](crate::Options::background_batch_policy)).
    pub background_batch_policy: bool,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            memory_budget: None,
            write_buffer_ratio: 0.5,
            row_cache_ratio: DEFAULT_ROW_CACHE_RATIO,
            background_threads: std::thread::available_parallelism()
                .map_or(2, |n| n.get())
                .clamp(2, 4),
            background_nice: 5,
            background_batch_policy: true,
        }
    }
}

/// What an environment shares: its options, the write-buffer manager and the pool.
pub(crate) struct EnvInner {
    pub options: EnvOptions,
    pub write_buffers: Arc<WriteBuffers>,
    pub budget: Arc<MemoryBudget>,
    /// The block cache of the engines, with a budget (without one each engine has its own).
    pub cache: Option<Arc<BlockCache>>,
    /// The row cache of the engines, with a budget and a row cache ratio above 0.
    pub row_cache: Option<Arc<RowCache>>,
    pub pool: Pool,
}

/// The environment engines share: a memory budget and a pool of background threads. Cheap to clone (a
/// shared handle); the threads stop when the last clone and the last engine opened with it are gone.
#[derive(Clone)]
pub struct SharedEnv {
    inner: Arc<EnvInner>,
}

impl std::fmt::Debug for SharedEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedEnv")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl SharedEnv {
    /// Starts an environment: its background threads, and its budget if `options` has one. A
    /// `write_buffer_ratio` outside `(0, 1]`, or a budget of 0, is refused.
    pub fn new(options: EnvOptions) -> Result<SharedEnv, LsmError> {
        if !(options.write_buffer_ratio > 0.0 && options.write_buffer_ratio <= 1.0) {
            return Err(LsmError::InvalidArgument(format!(
                "write_buffer_ratio {} is not in (0, 1]",
                options.write_buffer_ratio
            )));
        }
        if !(0.0..1.0).contains(&options.row_cache_ratio) {
            return Err(LsmError::InvalidArgument(format!(
                "row_cache_ratio {} is not in [0, 1)",
                options.row_cache_ratio
            )));
        }
        if options.memory_budget == Some(0) {
            return Err(LsmError::InvalidArgument(
                "a memory budget of 0 bytes".into(),
            ));
        }
        let limit = options
            .memory_budget
            .map(|b| ((b as f64 * options.write_buffer_ratio) as usize).max(1));
        let pool = Pool::start(PoolConfig {
            threads: options.background_threads.max(1),
            nice: options.background_nice,
            batch_policy: options.background_batch_policy,
        })
        .map_err(|source| LsmError::Spawn {
            thread: "lsm-bg".into(),
            source,
        })?;
        let write_buffers = WriteBuffers::new(limit);
        let budget = MemoryBudget::new(
            options.memory_budget,
            Arc::clone(&write_buffers) as Arc<dyn crate::budget::MemtableUsage>,
        );
        let cache = options.memory_budget.map(|_| {
            write_buffers.set_budget(&budget);
            BlockCache::with_budget(Arc::clone(&budget))
        });
        let row_cache = options
            .memory_budget
            .map(|b| (b as f64 * options.row_cache_ratio) as usize)
            .filter(|&bytes| bytes > 0)
            .map(|bytes| Arc::new(RowCache::new(bytes, Some(Arc::clone(&budget)))));
        Ok(SharedEnv {
            inner: Arc::new(EnvInner {
                options,
                write_buffers,
                budget,
                cache,
                row_cache,
                pool,
            }),
        })
    }

    /// The private environment of an engine opened without one: two threads at the engine's background
    /// priority, no budget.
    pub(crate) fn private(opts: &crate::Options) -> Result<SharedEnv, LsmError> {
        SharedEnv::new(EnvOptions {
            memory_budget: None,
            background_threads: 2,
            background_nice: opts.background_nice,
            background_batch_policy: opts.background_batch_policy,
            ..EnvOptions::default()
        })
    }

    /// The options the environment was made with.
    pub fn options(&self) -> &EnvOptions {
        &self.inner.options
    }

    /// The memory budget (with no capacity when the environment has none: charges are then only counted).
    /// [`MemoryBudget::reserve`] charges it for memory the caller holds.
    pub fn memory(&self) -> &Arc<MemoryBudget> {
        &self.inner.budget
    }

    /// The block cache the engines share (with a budget).
    pub(crate) fn block_cache(&self) -> Option<&Arc<BlockCache>> {
        self.inner.cache.as_ref()
    }

    /// The row cache the engines share (with a budget and a row cache ratio above 0).
    pub(crate) fn row_cache(&self) -> Option<&Arc<RowCache>> {
        self.inner.row_cache.as_ref()
    }

    /// The write-buffer manager.
    pub(crate) fn write_buffers(&self) -> &Arc<WriteBuffers> {
        &self.inner.write_buffers
    }

    /// The pool's scheduling state.
    pub(crate) fn pool(&self) -> &Arc<PoolShared> {
        self.inner.pool.shared()
    }

    /// Memory and background-work figures of the environment.
    pub fn stats(&self) -> EnvStats {
        let wb = &self.inner.write_buffers;
        let (mutable, pending, retired) = wb.usage();
        let pool = self.pool();
        let c = &pool.counters;
        let (flushes_queued, compactions_queued) = pool.queued();
        EnvStats {
            memory_budget: self.inner.options.memory_budget,
            write_buffer_limit: wb.limit(),
            memory: MemoryUsage {
                memtables_mutable: mutable,
                memtables_pending_flush: pending,
                memtables_flushed_held: retired,
                block_cache: self.inner.budget.cache_bytes(),
                sst_metadata: self.inner.budget.metadata_bytes(),
                reserved: self.inner.budget.reserved_bytes(),
                row_cache: self.inner.budget.row_cache_bytes(),
            },
            block_cache_capacity: self.inner.cache.as_ref().map(|c| c.capacity()),
            row_cache_capacity: self.inner.row_cache.as_ref().map(|c| c.capacity()),
            row_cache_entries: self.inner.row_cache.as_ref().map_or(0, |c| c.usage()),
            background_threads: self.inner.pool.config().threads,
            flush_jobs: c.flush_jobs.load(Ordering::Relaxed),
            compaction_jobs: c.compaction_jobs.load(Ordering::Relaxed),
            background_busy_micros: c.busy_micros.load(Ordering::Relaxed),
            flush_queue_micros: c.flush_queue_micros.load(Ordering::Relaxed),
            flushes_in_compactions: c.flushes_in_compactions.load(Ordering::Relaxed),
            flushes_queued,
            compactions_queued,
            write_buffer_stalls: wb.stalls.load(Ordering::Relaxed),
            write_buffer_stall_micros: wb.stall_micros.load(Ordering::Relaxed),
            switches_for_memory: wb.switches_for_memory.load(Ordering::Relaxed),
        }
    }
}

/// Where an environment's memory goes, in bytes. The components add up to [`MemoryUsage::total`], which is
/// what the budget charges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryUsage {
    /// Memtables taking writes (arena, point index, key filter).
    pub memtables_mutable: usize,
    /// Memtables switched out, waiting for their flush.
    pub memtables_pending_flush: usize,
    /// Memtables flushed but still held by a reader (an iterator, a snapshot read in progress).
    pub memtables_flushed_held: usize,
    /// Blocks in the shared block cache (0 without a budget: each engine's own cache is in its
    /// [`DbStats`](crate::DbStats)).
    pub block_cache: usize,
    /// SST metadata held outside the cache: indexes, filters, per-block bits (engines with a budget).
    pub sst_metadata: usize,
    /// Reservations of the engines' users ([`MemoryBudget::reserve`]).
    pub reserved: usize,
    /// What the row caches hold: the environment's shared one and the engines' own, doorkeeper tables and
    /// entries ([`MemoryBudget::row_cache_bytes`]).
    pub row_cache: usize,
}

impl MemoryUsage {
    /// Every component together: what the budget charges.
    pub fn total(&self) -> usize {
        self.memtables() + self.block_cache + self.sst_metadata + self.reserved + self.row_cache
    }

    /// All memtables (RocksDB's `rocksdb.size-all-mem-tables`).
    pub fn memtables(&self) -> usize {
        self.memtables_mutable + self.memtables_pending_flush + self.memtables_flushed_held
    }
}

impl EnvStats {
    /// The figures under RocksDB's names where they exist (`rocksdb.block-cache-usage`,
    /// `rocksdb.block-cache-capacity`, `rocksdb.size-all-mem-tables`) and in their style where not
    /// (`keyed-state.env.*`: the budget and each part of the memory breakdown, which add up to
    /// `keyed-state.env.memory-charged`; jobs, queues and stalls of the pool and the write-buffer manager).
    pub fn metrics(&self) -> Vec<crate::Metric> {
        let m = &self.memory;
        let pairs: [(&str, u64); 22] = [
            ("rocksdb.size-all-mem-tables", m.memtables() as u64),
            ("rocksdb.block-cache-usage", m.block_cache as u64),
            (
                "rocksdb.block-cache-capacity",
                self.block_cache_capacity.unwrap_or(0) as u64,
            ),
            (
                "keyed-state.env.memory-budget",
                self.memory_budget.unwrap_or(0) as u64,
            ),
            (
                "keyed-state.env.write-buffer-limit",
                self.write_buffer_limit.unwrap_or(0) as u64,
            ),
            ("keyed-state.env.memory-charged", m.total() as u64),
            (
                "keyed-state.env.memtables-mutable",
                m.memtables_mutable as u64,
            ),
            (
                "keyed-state.env.memtables-pending-flush",
                m.memtables_pending_flush as u64,
            ),
            (
                "keyed-state.env.memtables-flushed-held",
                m.memtables_flushed_held as u64,
            ),
            ("keyed-state.env.sst-metadata", m.sst_metadata as u64),
            ("keyed-state.env.reserved", m.reserved as u64),
            ("keyed-state.env.row-cache", m.row_cache as u64),
            (
                "keyed-state.env.row-cache-capacity",
                self.row_cache_capacity.unwrap_or(0) as u64,
            ),
            (
                "keyed-state.env.row-cache-entries",
                self.row_cache_entries as u64,
            ),
            (
                "keyed-state.env.background-threads",
                self.background_threads as u64,
            ),
            ("keyed-state.env.flush-jobs", self.flush_jobs),
            ("keyed-state.env.compaction-jobs", self.compaction_jobs),
            (
                "keyed-state.env.flushes-in-compactions",
                self.flushes_in_compactions,
            ),
            ("keyed-state.env.flushes-queued", self.flushes_queued as u64),
            (
                "keyed-state.env.compactions-queued",
                self.compactions_queued as u64,
            ),
            (
                "keyed-state.env.write-buffer-stall-micros",
                self.write_buffer_stall_micros,
            ),
            (
                "keyed-state.env.switches-for-memory",
                self.switches_for_memory,
            ),
        ];
        pairs
            .iter()
            .map(|(name, value)| crate::Metric {
                name: (*name).to_string(),
                value: *value,
            })
            .collect()
    }
}

/// Figures of a [`SharedEnv`]: its memory and its background pool.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct EnvStats {
    /// The budget, if any.
    pub memory_budget: Option<usize>,
    /// The memtables' share of it.
    pub write_buffer_limit: Option<usize>,
    /// What the shared block cache may hold now (what the rest leaves of the budget).
    pub block_cache_capacity: Option<usize>,
    /// The capacity of the environment's shared row cache, if it has one.
    pub row_cache_capacity: Option<usize>,
    /// Bytes of entries in the environment's shared row cache (its doorkeeper apart).
    pub row_cache_entries: usize,
    /// Where the memory goes.
    pub memory: MemoryUsage,
    /// Background threads.
    pub background_threads: usize,
    /// Flush jobs run (one memtable each, or none when another job had flushed it).
    pub flush_jobs: u64,
    /// Compaction jobs run (at most one compaction each).
    pub compaction_jobs: u64,
    /// Microseconds the background threads spent in jobs.
    pub background_busy_micros: u64,
    /// Microseconds flush requests waited for a thread, summed.
    pub flush_queue_micros: u64,
    /// Flush jobs a thread ran in the middle of a compaction rather than let them wait for its end.
    pub flushes_in_compactions: u64,
    /// Flush jobs waiting for a thread now.
    pub flushes_queued: usize,
    /// Compaction jobs waiting for a thread now.
    pub compactions_queued: usize,
    /// Times a writer waited because memtables reached their share of the budget.
    pub write_buffer_stalls: u64,
    /// Microseconds writers waited because memtables reached their share of the budget.
    pub write_buffer_stall_micros: u64,
    /// Memtables switched out because memtables reached 7/8 of their share (the largest of any engine).
    pub switches_for_memory: u64,
}

#[cfg(test)]
mod budget_tests {
    use std::sync::Arc;

    use super::write_buffer::{MemCharge, WriteBuffers};
    use crate::budget::MemoryBudget;
    use crate::cache::BlockCache;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_cache_gets_what_memtables_metadata_and_reservations_leave() {
        let wb = WriteBuffers::new(Some(32 * MIB));
        let budget = MemoryBudget::new(Some(64 * MIB), wb.clone());
        assert_eq!(budget.cache_capacity(), 64 * MIB);
        let mem = MemCharge::new(&wb, 10 * MIB, MIB);
        let meta = budget.charge_metadata(2 * MIB);
        let mut r = budget.reserve(4 * MIB);
        assert_eq!(budget.charged_outside_cache(), 16 * MIB);
        assert_eq!(budget.cache_capacity(), 48 * MIB);
        r.resize(60 * MIB);
        assert_eq!(budget.cache_capacity(), 0, "never below 0");
        r.resize(MIB);
        assert_eq!(budget.reserved_bytes(), MIB);
        drop((mem, meta, r));
        assert_eq!(budget.charged_outside_cache(), 0);
    }

    /// Counts the times it was told that room appeared.
    #[derive(Default)]
    struct Told(std::sync::atomic::AtomicUsize);

    impl crate::budget::RoomListener for Told {
        fn room_freed(&self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn listeners_are_told_when_memtables_metadata_or_reservations_give_memory_back() {
        let wb = WriteBuffers::new(Some(32 * MIB));
        let budget = MemoryBudget::new(Some(64 * MIB), wb.clone());
        wb.set_budget(&budget);
        let told = Arc::new(Told::default());
        let listener: std::sync::Weak<dyn crate::budget::RoomListener> =
            Arc::downgrade(&told) as std::sync::Weak<dyn crate::budget::RoomListener>;
        budget.listen_for_room(listener);
        let count = || told.0.load(std::sync::atomic::Ordering::SeqCst);
        let mem = MemCharge::new(&wb, 10 * MIB, MIB);
        let meta = budget.charge_metadata(2 * MIB);
        let mut r = budget.reserve(4 * MIB);
        r.resize(8 * MIB);
        assert_eq!(count(), 0, "growing charges make no room");
        mem.switched();
        mem.flushed();
        assert_eq!(count(), 0, "a memtable moving between states frees nothing");
        r.resize(MIB);
        assert_eq!(count(), 1, "a reservation shrank");
        drop(meta);
        assert_eq!(count(), 2, "a reader's metadata was let go");
        drop(mem);
        assert_eq!(count(), 3, "a flushed memtable was freed");
        drop(r);
        assert_eq!(count(), 4, "a reservation was dropped");
        drop(told);
        drop(budget.reserve(MIB));
    }

    #[test]
    fn a_growing_reservation_evicts_cache_blocks_at_once() {
        let wb = WriteBuffers::new(None);
        let budget = MemoryBudget::new(Some(4 * MIB), wb);
        let cache = BlockCache::with_budget(Arc::clone(&budget));
        for i in 0..4000u64 {
            cache.insert(1, i * 4096, Arc::new(vec![0u8; 1000]));
        }
        let full = cache.usage();
        assert!(full > 3 * MIB && full <= 4 * MIB, "{full}");
        let r = budget.reserve(3 * MIB);
        assert!(cache.usage() <= MIB, "{}", cache.usage());
        assert!(budget.available() <= MIB);
        drop(r);
        assert!(budget.available() >= 3 * MIB);
    }
}
