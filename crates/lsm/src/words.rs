//! Fixed-length arrays for a memtable's point index and key filter and for the index and filter bytes an
//! SST reader keeps: in an anonymous map of their own once they are large (as the memtable arena's chunks,
//! `arena.rs`), on the heap otherwise.
//!
//! A table's index grows by doubling and each generation, like the key filter, is freed with its table or
//! replaced; a reader's index and filter live as long as its file, which compactions replace. Each is tens
//! to hundreds of KiB, allocated and freed out of step with everything else. On the heap they share the
//! allocator's large pages with objects of other lifetimes, and a page goes back to the system only when
//! all of its objects are free; a map goes back when it is dropped
//! (`design/bench-results/2026-12-05-memory-charge/`).

use std::ptr::NonNull;

/// Types whose all-zero bytes are a valid value equal to their `Default`, and that have no drop glue, so
/// that a fresh anonymous map (zero-filled by the kernel) is an array of default values and may be unmapped
/// without dropping them.
///
/// # Safety
/// Implement only for types meeting both conditions.
pub(crate) unsafe trait ZeroBytes: Default {}

// SAFETY: an `AtomicU64` is a `u64` in memory (same size and bit validity); 0 is its default; no drop glue.
unsafe impl ZeroBytes for std::sync::atomic::AtomicU64 {}
// SAFETY: 0 is a valid `u8` and its default; no drop glue.
unsafe impl ZeroBytes for u8 {}

/// The smallest array given a map of its own instead of heap memory (arena chunks included): a heap
/// allocator returns a page only when all of its objects are free; a map goes back to the system when the
/// array is dropped.
pub(crate) const MAP_MIN: usize = 64 << 10;

/// The environment variable that, set to `off`, keeps every array (and so every arena chunk) on the heap (to
/// measure maps against the heap in one binary); read once.
pub const ARENA_MAP_SWITCH: &str = "KEYED_STATE_ARENA_MAP";

/// Whether large arrays get maps of their own: not with [`ARENA_MAP_SWITCH`] set to `off` (Miri maps them
/// too: it runs anonymous maps, not advice).
pub(crate) fn maps_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(ARENA_MAP_SWITCH).is_none_or(|v| v != "off"))
}

/// A fixed-length array of `T` (see the module documentation). Dereferences to `[T]`.
pub(crate) struct Words<T> {
    base: NonNull<T>,
    len: usize,
    /// The map holding the array (None: a boxed slice).
    map: Option<memmap2::MmapMut>,
}

// SAFETY: owns its elements like a `Box<[T]>`.
unsafe impl<T: Send> Send for Words<T> {}
// SAFETY: shared access gives `&[T]` only, as `Box<[T]>` does.
unsafe impl<T: Sync> Sync for Words<T> {}

impl<T: Default> Words<T> {
    /// `n` default values on the heap.
    pub(crate) fn from_default(n: usize) -> Self {
        let boxed: Box<[T]> = (0..n).map(|_| T::default()).collect();
        let len = boxed.len();
        let raw = Box::into_raw(boxed);
        // `Box::into_raw` never returns null (a zero-length box gives a dangling, non-null pointer).
        let base = NonNull::new(raw.cast::<T>()).unwrap_or(NonNull::dangling());
        Words {
            base,
            len,
            map: None,
        }
    }
}

impl<T: ZeroBytes> Words<T> {
    /// `n` default values: in a map of their own from [`MAP_MIN`] bytes (unless maps are switched off, see
    /// [`maps_on`]), on the heap below.
    pub(crate) fn zeroed(n: usize) -> Self {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        if bytes >= MAP_MIN && std::mem::align_of::<T>() <= 4096 && maps_on() {
            if let Ok(mut map) = memmap2::MmapMut::map_anon(bytes) {
                if let Some(base) = NonNull::new(map.as_mut_ptr().cast::<T>()) {
                    return Words {
                        base,
                        len: n,
                        map: Some(map),
                    };
                }
            }
        }
        Self::from_default(n)
    }
}

impl<T: ZeroBytes + Copy> Words<T> {
    /// A copy of `src` (in a map of its own from [`MAP_MIN`] bytes, as [`Words::zeroed`]).
    pub(crate) fn copy_of(src: &[T]) -> Self {
        let w = Self::zeroed(src.len());
        // SAFETY: `base` points at `src.len()` elements owned by `w` (from `Box::into_raw` or a writable map),
        // no reference to them exists yet, and `src` is another allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), w.base.as_ptr(), src.len()) };
        w
    }
}

impl<T> Words<T> {
    /// The first element's address, for a caller that writes elements through raw pointers while no
    /// reference into the array exists (the memtable arena's chunks); as valid as the array.
    #[inline]
    pub(crate) fn base(&self) -> NonNull<T> {
        self.base
    }

    /// Whether the array is in a map of its own.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        self.map.is_some()
    }
}

impl<T> std::ops::Deref for Words<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `base` points at `len` initialised `T`s (a boxed slice, or a zero-filled page-aligned map of
        // a `ZeroBytes` type) owned by `self` and alive until it is dropped; only shared references are made.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl<T> Drop for Words<T> {
    fn drop(&mut self) {
        if self.map.take().is_some() {
            return; // unmapped; `ZeroBytes` types have no drop glue
        }
        let slice = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.len);
        // SAFETY: `base`/`len` came from `Box::into_raw` of a boxed slice of this length in `from_default`
        // (there is no map), and the box is rebuilt only here, once.
        drop(unsafe { Box::from_raw(slice) });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn small_and_large_arrays_start_at_zero_and_keep_what_is_stored() {
        for n in [0, 1, 100, MAP_MIN / 8, 3 * MAP_MIN / 8 + 5] {
            let w: Words<AtomicU64> = Words::zeroed(n);
            assert_eq!(w.len(), n);
            assert!(w.iter().all(|x| x.load(Ordering::Relaxed) == 0));
            for (i, x) in w.iter().enumerate() {
                x.store(i as u64 * 3, Ordering::Relaxed);
            }
            assert!(w
                .iter()
                .enumerate()
                .all(|(i, x)| x.load(Ordering::Relaxed) == i as u64 * 3));
        }
    }

    #[test]
    fn a_copy_holds_the_same_bytes_small_or_large() {
        for n in [0, 7, MAP_MIN - 1, MAP_MIN, 2 * MAP_MIN + 3] {
            let src: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
            let w = Words::copy_of(&src);
            assert_eq!(&w[..], &src[..]);
            assert_eq!(w.map.is_some(), n >= MAP_MIN && maps_on());
        }
    }

    #[test]
    fn large_arrays_get_a_map_and_small_ones_the_heap() {
        let large: Words<AtomicU64> = Words::zeroed(MAP_MIN / 8);
        assert_eq!(large.map.is_some(), maps_on());
        let small: Words<AtomicU64> = Words::zeroed(MAP_MIN / 8 - 1);
        assert!(small.map.is_none());
    }
}
