//! Software prefetch: a hint that asks the CPU to start loading a cache line the code is about to read, so
//! that its cache miss overlaps other work (the heap backend's staged lookups, the memtable's skiplist search
//! and point-index growth).

/// Asks the CPU for the cache line holding `p`, into every cache level (`prefetcht0` on x86-64; a no-op on
/// other targets).
///
/// Only a hint: it reads nothing the program can observe and never faults, so any address is allowed,
/// dangling, null or past the end of an allocation included.
#[inline(always)]
pub fn prefetch_read<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` never faults and has no architectural effect (it neither reads nor writes memory
    // as far as the program can tell), whatever the address: it needs no valid, aligned or live pointer.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
