//! The change counter behind the writer's fast path, and the entry the writer keeps: every change a write
//! must notice (a memtable switch, an installed flush or compaction, a background error, a shutdown) bumps
//! the counter under the state lock; the slow path records the count with the memtable it let a write into;
//! a later write that finds the count unchanged goes into that memtable without the state lock. Memtable
//! switches are made only by holders of the writer lock, which every write holds throughout. The model
//! checks in `loom_fast_path` run this code (under `cfg(loom)` the counter is a loom atomic) with the
//! protocol around it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::sync::AtomicU64;

/// The ordering of a bump ([`note_change`], under the state lock).
pub(crate) const NOTE: Ordering = Ordering::Release;

/// The ordering of the writer's check of the count without the state lock ([`FastPathEntry::get`]).
pub(crate) const CHECK: Ordering = Ordering::Acquire;

/// The ordering of the read of the count under the state lock ([`FastPathEntry::record`]): the lock orders
/// it after every bump, all of which are made under it.
pub(crate) const RECORD: Ordering = Ordering::Relaxed;

/// A fresh change counter.
pub(crate) fn new_counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

/// Records a change that may stop writes or change the memtable (call with the state lock held).
#[inline]
pub(crate) fn note_change(changes: &AtomicU64) {
    changes.fetch_add(1, NOTE);
}

/// What the slow path leaves for the writer's fast path: the memtable it let a write into, and the change
/// count as it was then.
pub(crate) struct FastPathEntry<M> {
    /// The count when `mem` was recorded.
    seen: u64,
    /// The memtable.
    mem: Arc<M>,
}

impl<M> FastPathEntry<M> {
    /// The entry for `mem`, the current memtable (call with the state lock held).
    pub(crate) fn record(changes: &AtomicU64, mem: &Arc<M>) -> Self {
        FastPathEntry {
            seen: changes.load(RECORD),
            mem: Arc::clone(mem),
        }
    }

    /// The recorded memtable, if the count has not moved since it was recorded.
    #[inline]
    pub(crate) fn get(&self, changes: &AtomicU64) -> Option<&M> {
        (self.seen == changes.load(CHECK)).then_some(&*self.mem)
    }

    /// The recorded memtable, whatever the count (for the write the slow path just let in).
    #[inline]
    pub(crate) fn mem(&self) -> &M {
        &self.mem
    }
}
