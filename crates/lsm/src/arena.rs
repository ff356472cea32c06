//! A bump allocator for a memtable: its skiplist nodes, pushed versions and the bytes of entries that do not
//! fit in a node (large values, long keys). One allocation per chunk instead of one per entry, no allocator
//! header per entry, and the whole table's memory freed at once when the memtable is dropped.

use std::ptr::NonNull;

use parking_lot::Mutex;

use crate::words::Words;

/// Bytes copied into an [`Arena`]: valid, immutable and at a fixed address for as long as the arena lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArenaBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an `ArenaBytes` only reads immutable bytes that no one writes after the copy; sharing or sending
// the view is as safe as sharing `&[u8]`. Its users (memtable entries) never outlive their arena: entries live
// in the skiplist that owns the arena, inside its memtable, and readers hold the memtable (an `Arc` or a
// borrow).
unsafe impl Send for ArenaBytes {}
// SAFETY: as above.
unsafe impl Sync for ArenaBytes {}

impl ArenaBytes {
    /// The bytes.
    ///
    /// # Safety
    /// The arena that made this view must still be alive.
    #[inline]
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        // SAFETY: `ptr..ptr + len` lies in one chunk of the arena, initialised by `Arena::copy` before the
        // view was made and never written again; the caller guarantees the arena (owner of the chunk) lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// A chunk: a fixed-length zeroed byte array, in an anonymous map of its own from
/// [`MAP_MIN`](crate::words::MAP_MIN) bytes (a memtable's chunks are freed together long after they were
/// allocated, interleaved with other tables' chunks, and a heap allocator returns a page only when all of its
/// objects are free; a map goes back to the system when the chunk is dropped), on the heap below. The arena
/// writes into it only through [`Words::base`], under its mutex, into parts not yet handed out; parts handed
/// out are never written again.
type Chunk = Words<u8>;

struct Chunks {
    /// The chunks that small copies fill, the last one current.
    chunks: Vec<Chunk>,
    /// Bytes used in the last chunk.
    used: usize,
    /// Buffers of copies larger than a quarter chunk, one each.
    large: Vec<Chunk>,
}

/// Chunked bump allocator; frees everything when dropped.
pub(crate) struct Arena {
    chunk_size: usize,
    inner: Mutex<Chunks>,
}

impl Arena {
    /// An arena that allocates chunks of `chunk_size` bytes (larger requests get a buffer of their own).
    pub fn new(chunk_size: usize) -> Self {
        Arena {
            chunk_size: chunk_size.max(64),
            inner: Mutex::new(Chunks {
                chunks: Vec::new(),
                used: 0,
                large: Vec::new(),
            }),
        }
    }

    /// The size of the chunks small copies fill.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// Copies the concatenation of `parts` into the arena.
    pub fn copy(&self, parts: &[&[u8]]) -> ArenaBytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut g = self.inner.lock();
        let room = g.chunks.last().map_or(0, |c| c.len() - g.used);
        if room < len && len > self.chunk_size / 4 {
            // A large copy gets a buffer of its own; the current chunk keeps filling.
            let chunk = Chunk::zeroed(len);
            let view = fill(&chunk, 0, parts, len);
            g.large.push(chunk);
            return view;
        }
        if room < len {
            g.chunks.push(Chunk::zeroed(self.chunk_size));
            g.used = 0;
        }
        let start = g.used;
        match g.chunks.last() {
            Some(chunk) => {
                let view = fill(chunk, start, parts, len);
                g.used += len;
                view
            }
            // Only for a zero-length copy into an arena without chunks.
            None => ArenaBytes {
                ptr: NonNull::dangling(),
                len: 0,
            },
        }
    }
}

impl Arena {
    /// Moves `value` into the arena and returns its address: valid, aligned and never moved for as long as
    /// the arena lives, and never dropped (so `T` must not need dropping).
    pub fn alloc<T>(&self, value: T) -> NonNull<T> {
        const { assert!(!std::mem::needs_drop::<T>()) };
        let p = self
            .alloc_bytes(std::mem::size_of::<T>(), std::mem::align_of::<T>())
            .cast::<T>();
        // SAFETY: `alloc_bytes` returned room for a `T`, aligned for it, that nothing else refers to.
        unsafe { p.as_ptr().write(value) };
        p
    }

    /// `size` bytes aligned to `align` (a power of two), zeroed or holding bytes of nothing handed out, valid
    /// and never moved for as long as the arena lives; the pointer's provenance is the chunk's.
    pub fn alloc_bytes(&self, size: usize, align: usize) -> NonNull<u8> {
        // Bounds that keep the arithmetic below from overflowing (callers ask for nodes and versions: tens
        // to hundreds of bytes, 8-aligned).
        assert!(
            align.is_power_of_two() && align <= 4096 && size <= isize::MAX as usize / 2,
            "arena allocation of {size} bytes aligned to {align}"
        );
        let mut g = self.inner.lock();
        let at = |chunk: &Chunk, used: usize| {
            let addr = chunk.base().as_ptr() as usize + used;
            let pad = addr.next_multiple_of(align) - addr;
            (used + pad + size <= chunk.len()).then_some(used + pad)
        };
        let fits = g
            .chunks
            .last()
            .and_then(|c| Some((c.base(), at(c, g.used)?)));
        let (base, start) = match fits {
            Some(fits) => fits,
            None => {
                // A fresh chunk holds `size + align` bytes at least: the padding (< align) and the bytes fit.
                let chunk = Chunk::zeroed(self.chunk_size.max(size + align));
                let addr = chunk.base().as_ptr() as usize;
                let start = addr.next_multiple_of(align) - addr;
                let base = chunk.base();
                g.chunks.push(chunk);
                (base, start)
            }
        };
        g.used = start + size;
        // SAFETY: `start + size <= len` of the current chunk (checked by `at`; a fresh chunk holds
        // `size + align` bytes and `start < align`), so the pointer stays inside the chunk's allocation, in a
        // part no view points into yet (the bump pointer only grows, under the mutex held here).
        unsafe { NonNull::new_unchecked(base.as_ptr().add(start)) }
    }
}

/// Writes `parts` (`len` bytes in all) into `chunk` from `start`, a part of the chunk not handed out yet, and
/// returns the view of those bytes.
fn fill(chunk: &Chunk, start: usize, parts: &[&[u8]], len: usize) -> ArenaBytes {
    assert!(
        start.checked_add(len).is_some_and(|end| end <= chunk.len()),
        "arena copy out of its chunk"
    );
    let mut at = start;
    for p in parts {
        // SAFETY: `start + len <= chunk.len` (checked above) and the parts add up to `len`, so the
        // destination lies inside the chunk's allocation, in a region no view points into yet; the arena's
        // mutex (held by the caller) excludes other writers, and `p` cannot overlap a region not yet handed
        // out.
        unsafe {
            std::ptr::copy_nonoverlapping(p.as_ptr(), chunk.base().as_ptr().add(at), p.len());
        }
        at += p.len();
    }
    // SAFETY: `start <= chunk.len`, so the pointer stays inside (or one past the end of) the allocation.
    let ptr = unsafe { NonNull::new_unchecked(chunk.base().as_ptr().add(start)) };
    ArenaBytes { ptr, len }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::{maps_on, MAP_MIN};

    #[test]
    fn copies_stay_valid_and_apart_across_chunks_and_large_requests() {
        let a = Arena::new(64);
        let mut views = Vec::new();
        for i in 0..200u32 {
            let n = (i as usize * 7) % 90; // some larger than a quarter chunk, some than a chunk
            let bytes = vec![i as u8; n];
            views.push((a.copy(&[&i.to_be_bytes(), &bytes]), i, n));
        }
        for (v, i, n) in views {
            // SAFETY: `a` is alive.
            let s = unsafe { v.as_slice() };
            assert_eq!(s.len(), 4 + n);
            assert_eq!(&s[..4], &i.to_be_bytes());
            assert!(s[4..].iter().all(|b| *b == i as u8));
        }
    }

    #[test]
    fn mapped_chunks_hold_copies_like_heap_chunks() {
        let a = Arena::new(MAP_MIN);
        let views: Vec<_> = (0..2000u32)
            .map(|i| {
                let bytes = vec![i as u8; 100 + (i as usize % 300)];
                (a.copy(&[&bytes]), i)
            })
            .collect();
        assert!(a.inner.lock().chunks.len() > 1);
        assert_eq!(
            a.inner.lock().chunks[0].is_mapped(),
            maps_on(),
            "chunks of MAP_MIN bytes are maps unless switched off"
        );
        // A copy larger than a quarter chunk gets a buffer (and a map) of its own.
        let big = a.copy(&[&vec![7u8; MAP_MIN]]);
        for (v, i) in views {
            // SAFETY: `a` is alive.
            let s = unsafe { v.as_slice() };
            assert!(s.iter().all(|b| *b == i as u8));
        }
        // SAFETY: `a` is alive.
        assert!(unsafe { big.as_slice() }.iter().all(|b| *b == 7));
    }
}
