//! The slots' and the dirty log's storage: each reserved for the most entries the capacity holds, as
//! virtual memory touched as used, and backed by small (4 KiB) pages (`design/rmw-cache.md`, "Entries").
//!
//! An insertion writes its slot and its log entry into memory never touched before, and the kernel zeroes
//! the page on that first touch. Under transparent huge pages (an allocator such as mimalloc asks for them
//! on large allocations) that page is 2 MiB: one insertion in 32,768 zeroes 2 MiB at once, and finding a
//! free huge page may make the kernel compact memory first, which on a busy machine cost from 11 to 217 ns
//! per 64-byte line, against 26–32 ns for 4 KiB pages
//! ([`bench-results/2026-12-05-cache-insert/`](../../../design/bench-results/2026-12-05-cache-insert/README.md)).
//! Small pages make the first touch steady; the hash table, read on every probe, keeps the allocator's
//! pages.

use std::mem::size_of;

/// The page size the advice is aligned to.
const PAGE: usize = 4096;

/// Advises the kernel to back the reserved allocation of `v` with small pages: its whole capacity, in
/// whole pages (the pages at either end may hold other allocations, and keep their backing). Does nothing
/// for an empty reservation; a refused advice leaves the backing as it was.
pub(super) fn use_small_pages<T>(v: &Vec<T>) {
    let start = v.as_ptr() as usize;
    let end = start.saturating_add(v.capacity().saturating_mul(size_of::<T>()));
    let (from, to) = (start.next_multiple_of(PAGE), end & !(PAGE - 1));
    // Not under Miri, which cannot call `madvise` (the range is still computed), nor off Linux.
    #[cfg(any(miri, not(target_os = "linux")))]
    let _ = (from, to);
    #[cfg(all(target_os = "linux", not(miri)))]
    if to > from {
        // SAFETY: the range lies within the allocation of `v`, which lives while this runs; the advice
        // changes how the range's pages are backed, never what they hold.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_NOHUGEPAGE);
        }
    }
}

/// Pushes `item` onto `v`, advising its new allocation as [`use_small_pages`] does when the push had to
/// move it (more entries than the reservation: short keys and values, or a capacity past the reservation's
/// cap).
#[inline]
pub(super) fn push<T>(v: &mut Vec<T>, item: T) {
    let reserved = v.capacity();
    v.push(item);
    if v.capacity() != reserved {
        use_small_pages(v);
    }
}
