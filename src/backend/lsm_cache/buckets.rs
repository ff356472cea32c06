//! The slot table's bucket storage: a heap vector for small tables, and for large ones a fresh anonymous
//! mapping, whose pages the kernel zeroes on their first touch (`design/rmw-cache.md`, "Entries").
//!
//! A growth's new buckets must read as empty (0). From the heap they are zeroed by a write of every bucket
//! (and, when the allocator's memory is fresh, by the kernel again on first touch). A fresh mapping needs
//! neither: its pages are zero when first touched, one page at a time, as the growth's moves and the
//! insertions after it reach them, so no operation zeroes the table and nothing is zeroed ahead.

use std::ops::{Deref, DerefMut};

/// Tables of at least this many bytes are mapped (smaller ones come from the heap). 4 KiB (512 buckets)
/// under the crate's unit tests, so that the slot table's tests and the cache's run on mapped buckets.
const MAP_BYTES: usize = if cfg!(test) { 4 << 10 } else { 1 << 20 };

/// A table's buckets, all 0 when made.
pub(super) enum Buckets {
    Heap(Vec<u64>),
    #[cfg(target_os = "linux")]
    Mapped(Mapped),
}

impl Default for Buckets {
    fn default() -> Buckets {
        Buckets::Heap(Vec::new())
    }
}

impl Buckets {
    /// `n` empty buckets: mapped when large (falling back to the heap if the mapping fails; always the heap
    /// under Miri, as the engine's maps of their own).
    pub(super) fn zeroed(n: usize) -> Buckets {
        #[cfg(target_os = "linux")]
        if !cfg!(miri) && n.saturating_mul(std::mem::size_of::<u64>()) >= MAP_BYTES {
            if let Some(m) = Mapped::zeroed(n) {
                return Buckets::Mapped(m);
            }
        }
        Buckets::Heap(vec![0; n])
    }
}

impl Deref for Buckets {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Buckets::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Buckets::Mapped(m) => m,
        }
    }
}

impl DerefMut for Buckets {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        match self {
            Buckets::Heap(v) => v,
            #[cfg(target_os = "linux")]
            Buckets::Mapped(m) => m,
        }
    }
}

/// `len` buckets in a private anonymous mapping of their own, unmapped on drop.
#[cfg(target_os = "linux")]
pub(super) struct Mapped {
    ptr: std::ptr::NonNull<u64>,
    len: usize,
}

// SAFETY: `Mapped` owns its mapping exclusively, as a `Vec<u64>` owns its allocation.
#[cfg(target_os = "linux")]
unsafe impl Send for Mapped {}
// SAFETY: shared references only read, as for `[u64]`.
#[cfg(target_os = "linux")]
unsafe impl Sync for Mapped {}

#[cfg(target_os = "linux")]
impl Mapped {
    fn zeroed(len: usize) -> Option<Mapped> {
        let bytes = len.checked_mul(std::mem::size_of::<u64>())?;
        // SAFETY: a new private anonymous mapping, at an address the kernel chooses: it aliases nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // Read at random on every probe: huge pages where the kernel has them (as the allocator's large
        // allocations). A refused advice leaves small pages.
        // SAFETY: the range is the mapping just made; the advice changes its backing, never its contents.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
        let ptr = std::ptr::NonNull::new(p.cast::<u64>())?;
        Some(Mapped { ptr, len })
    }
}

#[cfg(target_os = "linux")]
impl Deref for Mapped {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        // SAFETY: the mapping holds `len` zero-initialised `u64`s (page aligned), readable and writable, for
        // as long as `self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(target_os = "linux")]
impl DerefMut for Mapped {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u64] {
        // SAFETY: as for `deref`, and `&mut self` makes the borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(target_os = "linux")]
impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `zeroed`, of this length, unmapped once; no slice of it outlives
        // `self`.
        unsafe {
            libc::munmap(
                self.ptr.as_ptr().cast(),
                self.len * std::mem::size_of::<u64>(),
            );
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn large_and_small_buckets_start_empty_and_hold_what_is_written() {
        for n in [16, MAP_BYTES / 8, 4 * MAP_BYTES / 8, (1 << 20) / 8] {
            let mut b = Buckets::zeroed(n);
            assert_eq!(b.len(), n);
            assert!(b.iter().all(|&e| e == 0));
            b[n - 1] = 7;
            b[0] = 3;
            assert_eq!((b[0], b[n - 1]), (3, 7));
        }
        #[cfg(all(target_os = "linux", not(miri)))]
        assert!(matches!(Buckets::zeroed(MAP_BYTES / 8), Buckets::Mapped(_)));
        assert!(matches!(
            Buckets::zeroed(MAP_BYTES / 8 - 1),
            Buckets::Heap(_)
        ));
    }

    /// Whether `b` is mapped (always false where buckets are never mapped).
    pub(in crate::backend::lsm_cache) fn is_mapped(b: &Buckets) -> bool {
        match b {
            Buckets::Heap(_) => false,
            #[cfg(target_os = "linux")]
            Buckets::Mapped(_) => true,
        }
    }

    /// Whether these tests' tables are mapped where they can be (Linux, not under Miri).
    pub(in crate::backend::lsm_cache) const MAPS: bool = cfg!(all(target_os = "linux", not(miri)));
}
