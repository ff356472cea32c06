//! The memory budget: one capacity shared by the memtables of every engine of an environment (through the
//! write-buffer manager, `write_buffer`), SST metadata held outside the block cache (indexes and filters
//! copied to the heap at open), reservations made by the engines' users ([`MemoryReservation`]), the row
//! caches (what they hold: `row_cache`), and the block cache, whose capacity is what the others leave.
//!
//! This is RocksDB's `WriteBufferManager` with `cost_to_cache` and Flink's managed memory: memtables and
//! metadata take their bytes first, and the cache shrinks (evicting at once) when they grow. The memtables'
//! own limit (the write-buffer share of the budget) stays with the write-buffer manager.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use crate::budget_pool::CachePool;

/// What the budget reads of the write-buffer manager (`env::write_buffer`): the bytes of mutable, pending
/// and retired memtables.
pub(crate) trait MemtableUsage: Send + Sync {
    /// `(mutable, pending, retired)` memtable bytes.
    fn usage(&self) -> (usize, usize, usize);
}

/// What the budget needs of the block cache that takes its leftover (`cache`).
pub(crate) trait LeftoverCache: Send + Sync {
    /// Bytes the cache holds.
    fn usage(&self) -> usize;
    /// Evicts until the cache fits in what the budget leaves it.
    fn fit(&self);
}

/// Told when memory charged outside the block cache is given back (a memtable freed, an SST reader closed,
/// a reservation shrunk or dropped): room may have appeared for what waits to reserve
/// ([`MemoryBudget::listen_for_room`]). Called on the thread that gave the memory back; keep it short and
/// do not charge the budget from it.
pub trait RoomListener: Send + Sync {
    /// Memory outside the block cache was given back.
    fn room_freed(&self);
}

/// The memory budget of an environment (see the module documentation). Shared through an `Arc`.
pub struct MemoryBudget {
    /// None: no budget; charges are counted for the figures only.
    capacity: Option<usize>,
    write_buffers: Arc<dyn MemtableUsage>,
    /// SST metadata held outside the cache (index, filter, per-block bits).
    metadata: AtomicUsize,
    /// Bytes reserved by the engines' users ([`MemoryBudget::reserve`]).
    reserved: AtomicUsize,
    /// Bytes the row caches hold (doorkeeper and entries; `row_cache`).
    row_caches: AtomicUsize,
    /// The shared block cache, told to shrink when the others grow.
    cache: OnceLock<Weak<dyn LeftoverCache>>,
    /// The part for caches kept above the engines ([`MemoryBudget::user_caches`]).
    user_caches: Arc<CachePool>,
    /// Told when room appears ([`MemoryBudget::listen_for_room`]); `listening` spares the lock when empty.
    listeners: Mutex<Vec<Weak<dyn RoomListener>>>,
    listening: AtomicBool,
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("capacity", &self.capacity)
            .field("metadata", &self.metadata.load(Ordering::Relaxed))
            .field("reserved", &self.reserved.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl MemoryBudget {
    /// A budget of `capacity` bytes whose memtables charge `write_buffers`.
    /// `None`: no capacity, charges are only counted.
    pub(crate) fn new(capacity: Option<usize>, write_buffers: Arc<dyn MemtableUsage>) -> Arc<Self> {
        Arc::new(MemoryBudget {
            capacity,
            write_buffers,
            metadata: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            row_caches: AtomicUsize::new(0),
            cache: OnceLock::new(),
            user_caches: Arc::default(),
            listeners: Mutex::new(Vec::new()),
            listening: AtomicBool::new(false),
        })
    }

    /// Calls `listener` whenever memory charged outside the block cache is given back, for as long as it
    /// lives: what waits for room in the budget (e.g. the buffers of checkpoint uploads) is woken then
    /// instead of polling.
    pub fn listen_for_room(&self, listener: Weak<dyn RoomListener>) {
        let mut ls = self.listeners.lock();
        ls.retain(|l| l.strong_count() > 0);
        ls.push(listener);
        self.listening.store(true, Ordering::Release);
    }

    /// Memory outside the cache was given back: tells the listeners (outside the lock).
    pub(crate) fn room_freed(&self) {
        if !self.listening.load(Ordering::Acquire) {
            return;
        }
        let live: Vec<Arc<dyn RoomListener>> = self
            .listeners
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for l in live {
            l.room_freed();
        }
    }

    /// Connects the cache that takes what the others leave.
    pub(crate) fn set_cache(&self, cache: &Arc<dyn LeftoverCache>) {
        let _ = self.cache.set(Arc::downgrade(cache));
    }

    /// The part of this budget that caches kept above the engines share (e.g. a state store's
    /// read-modify-write caches): empty until its user sizes it ([`CachePool::set_bytes`]).
    pub fn user_caches(&self) -> &Arc<CachePool> {
        &self.user_caches
    }

    /// The capacity in bytes, if there is a budget.
    pub fn capacity(&self) -> Option<usize> {
        self.capacity
    }

    /// Bytes taken by everything but the block cache: memtables, SST metadata, reservations and row caches.
    pub fn charged_outside_cache(&self) -> usize {
        let (mutable, pending, retired) = self.write_buffers.usage();
        mutable
            + pending
            + retired
            + self.metadata.load(Ordering::Relaxed)
            + self.reserved.load(Ordering::Relaxed)
            + self.row_caches.load(Ordering::Relaxed)
    }

    /// What the shared block cache may hold now: the capacity less what the others take (0 when they take it
    /// all; unbounded without a budget).
    pub fn cache_capacity(&self) -> usize {
        self.capacity.map_or(usize::MAX, |c| {
            c.saturating_sub(self.charged_outside_cache())
        })
    }

    /// Bytes in the shared block cache (0 without a budget: each engine then has its own cache).
    pub fn cache_bytes(&self) -> usize {
        self.cache
            .get()
            .and_then(Weak::upgrade)
            .map_or(0, |c| c.usage())
    }

    /// Everything charged: memtables, SST metadata, reservations, row caches and the shared block cache.
    pub fn usage(&self) -> usize {
        self.charged_outside_cache() + self.cache_bytes()
    }

    /// SST metadata bytes held outside the cache.
    pub fn metadata_bytes(&self) -> usize {
        self.metadata.load(Ordering::Relaxed)
    }

    /// Bytes reserved through [`MemoryBudget::reserve`].
    pub fn reserved_bytes(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Bytes the engines' row caches hold: the environment's shared one and any private ones (their
    /// doorkeeper tables and entries; `design/decisions/0008-row-cache.md`).
    pub fn row_cache_bytes(&self) -> usize {
        self.row_caches.load(Ordering::Relaxed)
    }

    /// A row cache grew by `bytes`: charged at once, and the block cache is made to fit each time the row
    /// caches' total crosses a MiB (between those, a block cache shard evicts at its next insert).
    pub(crate) fn row_cache_grew(&self, bytes: usize) {
        let before = self.row_caches.fetch_add(bytes, Ordering::Relaxed);
        if before >> 20 != (before + bytes) >> 20 {
            self.fit_cache();
        }
    }

    /// A row cache shrank by `bytes` (an entry replaced by a smaller one, or the cache dropped). Only a
    /// cache dropped tells the room listeners (`freed_room`): entries come and go all the time.
    pub(crate) fn row_cache_shrank(&self, bytes: usize, freed_room: bool) {
        self.row_caches.fetch_sub(bytes, Ordering::Relaxed);
        if freed_room && bytes > 0 {
            self.room_freed();
        }
    }

    /// Reserves `bytes` of the budget for the caller (a cache above the engine, a restore buffer, a heap
    /// backend's state) until the reservation is dropped or resized. A reservation is never refused: it
    /// shrinks the block cache, and memtables count against their own share. Compare
    /// [`available`](Self::available) first to stay inside the budget. Without a budget the bytes are only
    /// counted ([`reserved_bytes`](Self::reserved_bytes)).
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> MemoryReservation {
        let mut r = MemoryReservation {
            budget: Arc::clone(self),
            bytes: 0,
            metadata: false,
        };
        r.resize(bytes);
        r
    }

    /// Bytes of the capacity not charged by anything, the block cache included (`usize::MAX` without a
    /// budget).
    pub fn available(&self) -> usize {
        self.capacity
            .map_or(usize::MAX, |c| c.saturating_sub(self.usage()))
    }

    /// A charge for SST metadata (held by an open reader).
    pub(crate) fn charge_metadata(self: &Arc<Self>, bytes: usize) -> MemoryReservation {
        let mut r = MemoryReservation {
            budget: Arc::clone(self),
            bytes: 0,
            metadata: true,
        };
        r.resize(bytes);
        r
    }

    /// Evicts cache blocks until the cache fits in what the others leave.
    pub(crate) fn fit_cache(&self) {
        if let Some(cache) = self.cache.get().and_then(Weak::upgrade) {
            cache.fit();
        }
    }

    fn counter(&self, metadata: bool) -> &AtomicUsize {
        if metadata {
            &self.metadata
        } else {
            &self.reserved
        }
    }
}

/// Bytes reserved from a [`MemoryBudget`], given back on drop.
#[derive(Debug)]
pub struct MemoryReservation {
    budget: Arc<MemoryBudget>,
    bytes: usize,
    metadata: bool,
}

impl MemoryReservation {
    /// Bytes reserved.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Makes the reservation `bytes` (growing it shrinks the block cache at once).
    pub fn resize(&mut self, bytes: usize) {
        let counter = self.budget.counter(self.metadata);
        if bytes >= self.bytes {
            counter.fetch_add(bytes - self.bytes, Ordering::Relaxed);
            self.bytes = bytes;
            self.budget.fit_cache();
        } else {
            counter.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
            self.bytes = bytes;
            self.budget.room_freed();
        }
    }
}

impl Drop for MemoryReservation {
    fn drop(&mut self) {
        self.budget
            .counter(self.metadata)
            .fetch_sub(self.bytes, Ordering::Relaxed);
        if self.bytes > 0 {
            self.budget.room_freed();
        }
    }
}
