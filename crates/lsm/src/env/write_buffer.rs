//! The write-buffer manager: what every memtable of an environment's engines takes, against the share of the
//! memory budget memtables may use (RocksDB's `WriteBufferManager`).
//!
//! Memtables charge it in steps ([`MemCharge`]) as they grow, so that a write costs one comparison and the
//! shared counters move once per step. A memtable's charge is *mutable* while writes go into it, *pending*
//! once switched out and waiting for its flush, and *retired* once flushed (still held by readers, freed when
//! the last one lets go). Two thresholds act on the limit:
//!
//! * **flush**: when mutable bytes not already asked to switch exceed 7/8 of the limit (or the limit is
//!   reached and they are half of it), writers see [`WriteBuffers::flush_wanted`] and switch the largest
//!   active memtable of *any* engine of the environment (the engine's writer does it, see `db/write.rs`);
//! * **stall**: writers wait only when mutable and pending bytes together reach the limit, i.e. when flushes
//!   cannot keep up. Retired bytes count in the memory figures but never stall a writer: no flush would free
//!   them (a reader holds them), and the reader may be the writer itself.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::budget::{MemoryBudget, MemtableUsage};

/// Memtable bytes of an environment and its limit.
pub(crate) struct WriteBuffers {
    /// The bytes memtables may take in all (`None`: no limit; each engine's own options bound its memtables).
    limit: Option<usize>,
    /// Bytes charged by memtables taking writes.
    mutable: AtomicUsize,
    /// Bytes charged by memtables switched out, not yet flushed.
    pending: AtomicUsize,
    /// Bytes charged by flushed memtables still held by readers.
    retired: AtomicUsize,
    /// Mutable bytes of memtables whose engine was asked to switch them and has not yet.
    requested: AtomicUsize,
    /// Whether writers should switch a memtable (read by every write's fast path; written only on change).
    flush_wanted: AtomicBool,
    /// Stalled writers wait here for memory to be freed.
    stall: Mutex<()>,
    freed: Condvar,
    /// Times and microseconds writers stalled for memory, over all engines.
    pub stalls: AtomicU64,
    pub stall_micros: AtomicU64,
    /// Memtables switched because of the limit (the largest of any engine), not because they were full.
    pub switches_for_memory: AtomicU64,
    /// The budget memtables are part of: its block cache shrinks when they grow.
    budget: OnceLock<Weak<MemoryBudget>>,
}

/// The state of one memtable's charge.
const MUTABLE: u8 = 0;
const PENDING: u8 = 1;
const RETIRED: u8 = 2;

impl WriteBuffers {
    /// A manager for `limit` bytes of memtables (`None`: unlimited).
    pub fn new(limit: Option<usize>) -> Arc<Self> {
        Arc::new(WriteBuffers {
            limit,
            mutable: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            retired: AtomicUsize::new(0),
            requested: AtomicUsize::new(0),
            flush_wanted: AtomicBool::new(false),
            stall: Mutex::new(()),
            freed: Condvar::new(),
            stalls: AtomicU64::new(0),
            stall_micros: AtomicU64::new(0),
            switches_for_memory: AtomicU64::new(0),
            budget: OnceLock::new(),
        })
    }

    /// Connects the budget whose block cache makes room when memtables grow.
    pub fn set_budget(&self, budget: &Arc<MemoryBudget>) {
        let _ = self.budget.set(Arc::downgrade(budget));
    }

    /// Memtables grew: the budget's cache makes room.
    fn grew(&self) {
        if let Some(b) = self.budget.get().and_then(Weak::upgrade) {
            b.fit_cache();
        }
    }

    /// Memtable memory was given back: the budget tells whoever waits for room.
    fn freed(&self) {
        if let Some(b) = self.budget.get().and_then(Weak::upgrade) {
            b.room_freed();
        }
    }

    /// The limit, if any.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Bytes of memtables taking writes, switched out and waiting for flush, and flushed but still held.
    pub fn usage(&self) -> (usize, usize, usize) {
        (
            self.mutable.load(Ordering::Relaxed),
            self.pending.load(Ordering::Relaxed),
            self.retired.load(Ordering::Relaxed),
        )
    }

    /// Whether writers should switch the largest memtable (see the module documentation).
    #[inline]
    pub fn flush_wanted(&self) -> bool {
        self.flush_wanted.load(Ordering::Relaxed)
    }

    /// Whether writers must wait for flushes: mutable and pending bytes reach the limit while a flush is
    /// pending (without one, waiting would free nothing: memtables taking writes are switched instead, see
    /// [`flush_wanted`](Self::flush_wanted)).
    pub fn must_stall(&self) -> bool {
        self.limit.is_some_and(|l| {
            let pending = self.pending.load(Ordering::Relaxed);
            pending > 0 && self.mutable.load(Ordering::Relaxed) + pending >= l
        })
    }

    /// The memtable size of an engine sharing this manager, for one it was configured with: at most a
    /// quarter of the limit (and at least 64 KiB), so that a few engines' tables and their fixed parts
    /// (point index, key filter, arena chunk) fit in it.
    pub fn memtable_size_for(&self, configured: usize) -> usize {
        match self.limit {
            None => configured,
            Some(l) => configured.min((l / 4).max(64 << 10)),
        }
    }

    /// Records that an engine was asked to switch a memtable holding `bytes` (its writer will).
    pub fn note_requested(&self, bytes: usize) {
        self.requested.fetch_add(bytes, Ordering::Relaxed);
        self.update();
    }

    /// Takes back a request of [`note_requested`](Self::note_requested).
    pub fn clear_requested(&self, bytes: usize) {
        let _ = self
            .requested
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                Some(r.saturating_sub(bytes))
            });
        self.update();
    }

    /// Recomputes [`flush_wanted`](Self::flush_wanted) (stored only when it changes).
    fn update(&self) {
        let Some(limit) = self.limit else { return };
        let mutable = self.mutable.load(Ordering::Relaxed);
        let unrequested = mutable.saturating_sub(self.requested.load(Ordering::Relaxed));
        let total = mutable + self.pending.load(Ordering::Relaxed);
        let want = unrequested > limit / 8 * 7 || (total >= limit && unrequested >= limit / 2);
        if self.flush_wanted.load(Ordering::Relaxed) != want {
            self.flush_wanted.store(want, Ordering::Relaxed);
        }
    }

    /// Wakes stalled writers after bytes stopped counting towards the stall.
    fn wake(&self) {
        let _g = self.stall.lock();
        self.freed.notify_all();
    }

    /// Waits (at most `timeout`) for memtable memory to be freed or to move out of the stall's count.
    pub fn wait_freed(&self, timeout: Duration) {
        let mut g = self.stall.lock();
        if self.must_stall() {
            let _ = self.freed.wait_for(&mut g, timeout);
        }
    }

    fn counter(&self, state: u8) -> &AtomicUsize {
        match state {
            MUTABLE => &self.mutable,
            PENDING => &self.pending,
            _ => &self.retired,
        }
    }
}

/// A memtable's charge: grows in steps with the table, moves from mutable to pending to retired, and is
/// given back when the table is dropped.
pub(crate) struct MemCharge {
    wb: Arc<WriteBuffers>,
    /// Bytes charged (at least the table's size, by less than a step).
    reserved: AtomicUsize,
    /// [`MUTABLE`], [`PENDING`] or [`RETIRED`].
    state: AtomicU8,
    step: usize,
}

impl MemCharge {
    /// A charge of `initial` bytes, growing `step` bytes at a time.
    pub fn new(wb: &Arc<WriteBuffers>, initial: usize, step: usize) -> MemCharge {
        let c = MemCharge {
            wb: Arc::clone(wb),
            reserved: AtomicUsize::new(0),
            state: AtomicU8::new(MUTABLE),
            step: step.max(4096),
        };
        c.grow_to(initial);
        c
    }

    /// Makes the charge cover `bytes` (the table's writer only).
    #[inline]
    pub fn grow_to(&self, bytes: usize) {
        if bytes > self.reserved.load(Ordering::Relaxed) {
            self.grow_slow(bytes);
        }
    }

    #[cold]
    fn grow_slow(&self, bytes: usize) {
        let old = self.reserved.load(Ordering::Relaxed);
        let new = bytes.div_ceil(self.step) * self.step;
        self.reserved.store(new, Ordering::Relaxed);
        self.wb
            .counter(self.state.load(Ordering::Relaxed))
            .fetch_add(new - old, Ordering::Relaxed);
        self.wb.update();
        self.wb.grew();
    }

    /// Bytes charged.
    #[cfg(test)]
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Moves the charge to `state` (only forward: mutable → pending → retired).
    fn move_to(&self, state: u8) {
        let from = self.state.load(Ordering::Relaxed);
        if from >= state {
            return;
        }
        self.state.store(state, Ordering::Relaxed);
        let bytes = self.reserved.load(Ordering::Relaxed);
        self.wb.counter(from).fetch_sub(bytes, Ordering::Relaxed);
        self.wb.counter(state).fetch_add(bytes, Ordering::Relaxed);
        self.wb.update();
        if state == RETIRED {
            self.wb.wake();
        }
    }

    /// The table was switched out (no more writes); its flush is pending.
    pub fn switched(&self) {
        self.move_to(PENDING);
    }

    /// The table's flush is installed; readers may still hold it.
    pub fn flushed(&self) {
        self.move_to(RETIRED);
    }
}

impl Drop for MemCharge {
    fn drop(&mut self) {
        let state = self.state.load(Ordering::Relaxed);
        self.wb
            .counter(state)
            .fetch_sub(self.reserved.load(Ordering::Relaxed), Ordering::Relaxed);
        self.wb.update();
        if state != RETIRED {
            self.wb.wake();
        }
        self.wb.freed();
    }
}

impl MemtableUsage for WriteBuffers {
    fn usage(&self) -> (usize, usize, usize) {
        WriteBuffers::usage(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_charge_grows_in_steps_and_moves_through_its_states() {
        let wb = WriteBuffers::new(Some(64 * MIB));
        let c = MemCharge::new(&wb, 100, MIB);
        assert_eq!(wb.usage(), (MIB, 0, 0));
        c.grow_to(MIB);
        assert_eq!(c.reserved(), MIB);
        c.grow_to(MIB + 1);
        assert_eq!(wb.usage(), (2 * MIB, 0, 0));
        c.switched();
        assert_eq!(wb.usage(), (0, 2 * MIB, 0));
        c.flushed();
        assert_eq!(wb.usage(), (0, 0, 2 * MIB));
        drop(c);
        assert_eq!(wb.usage(), (0, 0, 0));
    }

    #[test]
    fn flush_is_wanted_past_seven_eighths_and_stalls_come_at_the_limit() {
        let wb = WriteBuffers::new(Some(64 * MIB));
        let a = MemCharge::new(&wb, 50 * MIB, MIB);
        assert!(!wb.flush_wanted());
        let b = MemCharge::new(&wb, 7 * MIB, MIB);
        assert!(wb.flush_wanted(), "57 MiB > 56 MiB");
        // Asked to switch: no longer wanted while the request stands.
        wb.note_requested(50 * MIB);
        assert!(!wb.flush_wanted());
        a.switched();
        wb.clear_requested(50 * MIB);
        assert!(!wb.flush_wanted() && !wb.must_stall());
        let c = MemCharge::new(&wb, 7 * MIB, MIB);
        assert!(wb.must_stall(), "50 pending + 14 mutable");
        // Nothing pending: waiting would free nothing.
        let idle = WriteBuffers::new(Some(8 * MIB));
        let _d = MemCharge::new(&idle, 9 * MIB, MIB);
        assert!(!idle.must_stall() && idle.flush_wanted());
        // Retired bytes never stall.
        a.flushed();
        assert!(!wb.must_stall());
        drop((a, b, c));
        assert_eq!(wb.usage(), (0, 0, 0));
    }

    #[test]
    fn without_a_limit_nothing_is_wanted_or_stalled() {
        let wb = WriteBuffers::new(None);
        let _a = MemCharge::new(&wb, 1 << 40, MIB);
        assert!(!wb.flush_wanted() && !wb.must_stall());
    }
}
