//! The cell holding a memtable's current point-index generation: the writer publishes a rebuilt generation
//! in it whole, readers load the one current when they probe. Normal builds keep it in crossbeam-epoch's
//! `Atomic`, a replaced generation going to the epoch collector. Under `cfg(loom)` it is a loom `AtomicPtr`
//! with the same orderings ([`LOAD`], [`PUBLISH`]), so that the model checks see the order between building a
//! generation, re-placing its entries and publishing it; a replaced generation is then kept until the table
//! is dropped instead of being handed to the collector (the models check the publication, not crossbeam's
//! reclamation, whose atomics loom cannot see).

use std::sync::atomic::Ordering;

use super::point_index::IndexTable;
use crossbeam_epoch as epoch;

/// The ordering a reader loads the current generation with: it pairs with [`PUBLISH`], so a reader that
/// sees a new generation also sees its slots as the writer filled them before the swap.
pub(super) const LOAD: Ordering = Ordering::Acquire;

/// The ordering of the swap that publishes a new generation (Release for the readers' [`LOAD`]; Acquire
/// for the writer's own load of the replaced one).
pub(super) const PUBLISH: Ordering = Ordering::AcqRel;

/// The current generation of a memtable's point index (never empty while the table lives).
#[cfg(not(loom))]
pub(super) struct IndexCell(epoch::Atomic<IndexTable>);

#[cfg(not(loom))]
impl IndexCell {
    /// A cell holding `table`.
    pub(super) fn new(table: IndexTable) -> Self {
        IndexCell(epoch::Atomic::new(table))
    }

    /// The current generation, valid while `guard` and this borrow of the cell live.
    #[inline]
    pub(super) fn load<'g>(&'g self, guard: &'g epoch::Guard) -> Option<&'g IndexTable> {
        // SAFETY: the pointer is either the cell's first generation or one stored by `replace`; a generation
        // replaced there is destroyed through `defer_destroy`, only after every guard pinned before the swap
        // (like `guard`) is gone, and the current one is freed by `drop`, which cannot run while this borrow
        // of the cell lives.
        unsafe { self.0.load(LOAD, guard).as_ref() }
    }

    /// Publishes `table` as the current generation (writer only); the replaced one goes to the epoch
    /// collector, which frees it once no reader can hold it.
    #[inline]
    pub(super) fn replace(&self, table: IndexTable, guard: &epoch::Guard) {
        let prev = self.0.swap(epoch::Owned::new(table), PUBLISH, guard);
        // SAFETY: `prev` was the current generation and is no longer reachable from the cell; readers that
        // loaded it hold guards pinned before this point, and `defer_destroy` waits for them.
        unsafe { guard.defer_destroy(prev) };
        // Hand the old generation to the global queue now: a thread-local bag is only flushed when it holds 64
        // deferred items, and until then the generation (megabytes) would stay allocated.
        guard.flush();
    }
}

/// Frees the current generation (`epoch::Atomic` frees nothing when dropped; the replaced ones went to the
/// epoch collector in `replace`).
#[cfg(not(loom))]
impl Drop for IndexCell {
    fn drop(&mut self) {
        // SAFETY: `&mut self` means no borrow of the cell is alive, and every reference into a generation is
        // tied to such a borrow (`load`), so no thread can read this generation any more; the pointer was
        // made from an `Owned` (`new` or `replace`) and is taken out of the cell (replaced by null) before it
        // is freed, once.
        unsafe {
            let guard = epoch::unprotected();
            let current = self.0.swap(epoch::Shared::null(), Ordering::Relaxed, guard);
            if !current.is_null() {
                drop(current.into_owned());
            }
        }
    }
}

/// The current generation of a memtable's point index, published through a loom atomic.
#[cfg(loom)]
pub(super) struct IndexCell {
    /// The current generation (from `Box::into_raw`).
    current: crate::sync::AtomicPtr<IndexTable>,
    /// The replaced generations, freed with the cell (readers of the model may still hold them). Boxed so
    /// that a generation stays where readers found it while the vector grows.
    #[allow(clippy::vec_box)]
    retired: std::sync::Mutex<Vec<Box<IndexTable>>>,
}

#[cfg(loom)]
impl IndexCell {
    /// A cell holding `table`.
    pub(super) fn new(table: IndexTable) -> Self {
        IndexCell {
            current: crate::sync::AtomicPtr::new(Box::into_raw(Box::new(table))),
            retired: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The current generation, valid while this borrow of the cell lives.
    pub(super) fn load<'g>(&'g self, _guard: &'g epoch::Guard) -> Option<&'g IndexTable> {
        // SAFETY: the pointer comes from `Box::into_raw` (`new`, `replace`); a generation is freed only when
        // the cell is dropped (the current one, and the replaced ones in `retired`), which cannot happen while
        // this borrow lives.
        unsafe { self.current.load(LOAD).as_ref() }
    }

    /// Publishes `table` as the current generation (writer only); the replaced one is kept until the cell
    /// is dropped.
    pub(super) fn replace(&self, table: IndexTable, _guard: &epoch::Guard) {
        let prev = self.current.swap(Box::into_raw(Box::new(table)), PUBLISH);
        // SAFETY: `prev` came from `Box::into_raw` and is no longer reachable from the cell; it is owned
        // here once (readers only borrow it, until the cell drops `retired`).
        let prev = unsafe { Box::from_raw(prev) };
        self.retired
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(prev);
    }
}

/// Frees the current generation (the replaced ones are freed with `retired`).
#[cfg(loom)]
impl Drop for IndexCell {
    fn drop(&mut self) {
        let current = self.current.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !current.is_null() {
            // SAFETY: `&mut self`: no reader borrows the cell; the pointer came from `Box::into_raw` and was
            // taken out of the cell above, so it is freed once.
            drop(unsafe { Box::from_raw(current) });
        }
    }
}
