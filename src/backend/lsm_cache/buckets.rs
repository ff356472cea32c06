//! The slot table's bucket storage: a heap vector for small tables, and for large ones a fresh anonymous
//! map of their own (`memmap2`), whose pages the kernel zeroes on their first touch
//! (`design/rmw-cache.md`, "Entries").
//!
//! A growth's new buckets must read as empty (0). From the heap they are zeroed by a write of every bucket
//! (and, when the allocator's memory is fresh, by the kernel again on first touch). A fresh map needs
//! neither: its pages are zero when first touched, as the growth's moves and the insertions after it reach
//! them, so nothing is zeroed ahead.
//! The map is advised to huge pages: where the kernel gives them on advice (transparent huge pages
//! `enabled=madvise` or `always`), a 2 MiB page is zeroed whole by the operation that first touches it, so
//! after a growth the first operations that reach a page each zero 2 MiB, until the table's pages are all
//! touched (the advice measured in `design/rmw-cache.md`, "Entries": it paid for the map ops).
//!
//! Memory for new buckets may be refused (the map and the heap both): [`Buckets::zeroed`] then returns
//! `None` and the table does not grow, so that the cache declines the entry instead of aborting.

use std::ops::{Deref, DerefMut};

/// Tables of at least this many bytes are mapped (smaller ones come from the heap). 4 KiB (512 buckets)
/// under the crate's unit tests, so that the slot table's tests and the cache's run on mapped buckets.
const MAP_BYTES: usize = if cfg!(test) { 4 << 10 } else { 1 << 20 };

/// A table's buckets, all 0 when made.
pub(super) enum Buckets {
    Heap(Vec<u64>),
    #[cfg(unix)]
    Mapped(Mapped),
}

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets::Heap(Vec::new())
    }
}

impl Buckets {
    /// `n` empty buckets: mapped when large (from the heap if the map fails), or `None` when the memory is
    /// refused.
    pub(super) fn zeroed(n: usize) -> Option<Buckets> {
        #[cfg(test)]
        if tests::REFUSE.get() {
            return None;
        }
        #[cfg(unix)]
        if n.saturating_mul(std::mem::size_of::<u64>()) >= MAP_BYTES {
            if let Some(m) = Mapped::zeroed(n) {
                return Some(Buckets::Mapped(m));
            }
        }
        let mut v = Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.resize(n, 0);
        Some(Buckets::Heap(v))
    }
}

impl Deref for Buckets {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Buckets::Heap(v) => v,
            #[cfg(unix)]
            Buckets::Mapped(m) => m,
        }
    }
}

impl DerefMut for Buckets {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        match self {
            Buckets::Heap(v) => v,
            #[cfg(unix)]
            Buckets::Mapped(m) => m,
        }
    }
}

/// `len` buckets in a private anonymous map of their own, unmapped when dropped.
#[cfg(unix)]
pub(super) struct Mapped {
    map: memmap2::MmapMut,
    len: usize,
}

#[cfg(unix)]
impl Mapped {
    fn zeroed(len: usize) -> Option<Mapped> {
        let bytes = len.checked_mul(std::mem::size_of::<u64>())?;
        let map = memmap2::MmapMut::map_anon(bytes).ok()?;
        // Read at random on every probe (the advice measured: module documentation). A refused advice
        // leaves small pages. Not under Miri, which maps but cannot advise.
        #[cfg(all(target_os = "linux", not(miri)))]
        let _ = map.advise(memmap2::Advice::HugePage);
        Some(Mapped { map, len })
    }
}

#[cfg(unix)]
impl Deref for Mapped {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        // SAFETY: the map holds `len` `u64`s (its `len * 8` bytes, page aligned, zero-filled by the kernel,
        // readable and writable; every bit pattern is a valid `u64`) for as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<u64>(), self.len) }
    }
}

#[cfg(unix)]
impl DerefMut for Mapped {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as for `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().cast::<u64>(), self.len) }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// While set, [`Buckets::zeroed`] refuses (on this thread): memory the system denies.
        pub(in crate::backend::lsm_cache) static REFUSE: Cell<bool> = const { Cell::new(false) };
    }

    #[test]
    fn large_and_small_buckets_start_empty_and_hold_what_is_written() {
        for n in [16, MAP_BYTES / 8, 4 * MAP_BYTES / 8, (1 << 20) / 8] {
            let Some(mut b) = Buckets::zeroed(n) else {
                panic!("{n} buckets refused");
            };
            assert_eq!(b.len(), n);
            assert!(b.iter().all(|&e| e == 0));
            b[n - 1] = 7;
            b[0] = 3;
            assert_eq!((b[0], b[n - 1]), (3, 7));
            assert_eq!(is_mapped(&b), MAPS && n >= MAP_BYTES / 8, "{n} buckets");
        }
        REFUSE.set(true);
        assert!(Buckets::zeroed(16).is_none());
        REFUSE.set(false);
    }

    /// Whether `b` is mapped (always false where buckets are never mapped).
    pub(in crate::backend::lsm_cache) fn is_mapped(b: &Buckets) -> bool {
        match b {
            Buckets::Heap(_) => false,
            #[cfg(unix)]
            Buckets::Mapped(_) => true,
        }
    }

    /// Whether these tests' tables are mapped where they can be (Unix; under Miri too, which maps).
    pub(in crate::backend::lsm_cache) const MAPS: bool = cfg!(unix);
}
