//! A bump allocator for the bytes of memtable entries that do not fit in a skiplist node (large values,
//! long keys): one allocation per chunk instead of one per entry, no allocator header per entry, and the
//! whole table's buffers freed at once when the memtable is dropped.

use std::ptr::NonNull;

use parking_lot::Mutex;

/// Bytes copied into an [`Arena`]: valid, immutable and at a fixed address for as long as the arena lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ArenaBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: an `ArenaBytes` only reads immutable bytes that no one writes after the copy; sharing or sending
// the view is as safe as sharing `&[u8]`. Its users (memtable entries) never outlive their arena: entries live
// in the skiplist of the memtable that owns the arena, and readers hold the memtable (an `Arc` or a borrow).
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

struct Chunks {
    /// The chunks that small copies fill, the last one current; a chunk's heap buffer never moves, also when
    /// this vector grows.
    chunks: Vec<Box<[u8]>>,
    /// Bytes used in the last chunk.
    used: usize,
    /// Buffers of copies larger than a quarter chunk, one each.
    large: Vec<Box<[u8]>>,
}

/// Chunked bump allocator; frees everything when dropped.
pub(crate) struct Arena {
    chunk_size: usize,
    inner: Mutex<Chunks>,
}

impl Arena {
    /// An arena that allocates chunks of `chunk_size` bytes (larger requests get a chunk of their own).
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

    /// Copies the concatenation of `parts` into the arena.
    pub fn copy(&self, parts: &[&[u8]]) -> ArenaBytes {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut g = self.inner.lock();
        let room = g.chunks.last().map_or(0, |c| c.len() - g.used);
        if room < len {
            if len > self.chunk_size / 4 {
                // A large copy gets a buffer of its own; the current chunk keeps filling.
                g.large.push(vec![0u8; len].into_boxed_slice());
                return match g.large.last_mut() {
                    Some(dst) => fill(dst, 0, parts, len),
                    None => ArenaBytes {
                        ptr: NonNull::dangling(),
                        len: 0,
                    },
                };
            }
            g.chunks.push(vec![0u8; self.chunk_size].into_boxed_slice());
            g.used = 0;
        }
        let start = g.used;
        g.used += len;
        let Chunks { chunks, .. } = &mut *g;
        match chunks.last_mut() {
            Some(dst) => fill(dst, start, parts, len),
            // Unreachable: a chunk was pushed above when there was no room.
            None => ArenaBytes {
                ptr: NonNull::dangling(),
                len: 0,
            },
        }
    }
}

/// Writes `parts` into `chunk` from `start` and returns the view of those `len` bytes.
fn fill(chunk: &mut [u8], start: usize, parts: &[&[u8]], len: usize) -> ArenaBytes {
    let mut at = start;
    for p in parts {
        if let Some(dst) = chunk.get_mut(at..at + p.len()) {
            dst.copy_from_slice(p);
        }
        at += p.len();
    }
    let ptr = chunk
        .get_mut(start..)
        .and_then(|s| NonNull::new(s.as_mut_ptr()))
        .unwrap_or(NonNull::dangling());
    ArenaBytes {
        ptr,
        len: if start + len <= chunk.len() { len } else { 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
