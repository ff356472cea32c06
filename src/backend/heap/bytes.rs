//! [`SmallBytes`]: a 16-byte byte string stored inline when short (keys and small values), shared when long.
//!
//! Table entries of the heap backend are `(SmallBytes, SmallBytes)`: a typical entry key (`KG | i64 | NS`,
//! 10 bytes) and value (8 bytes) live inside the hash table slot (32 bytes with both), so a lookup touches
//! one cache line, and a table clone (copy-on-write after a snapshot) copies no heap allocation for them.
//! Longer bytes live in one reference-counted allocation (`[refs | len | cap | bytes]`) reached through a
//! thin pointer: one dependent load from the slot to the bytes.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

use keyed_state_lsm::util::prefetch_read;

const INLINE: usize = 14;

/// Bytes stored inline up to 14 bytes, else in a shared, growable buffer (copied only when written while
/// shared).
#[derive(Clone)]
pub enum SmallBytes {
    /// Short bytes stored in place.
    Inline {
        /// Number of bytes used.
        len: u8,
        /// The bytes (first `len` used).
        buf: [u8; INLINE],
    },
    /// Longer bytes in a shared buffer.
    Shared(SharedBuf),
}

/// The header of a [`SharedBuf`] allocation; `cap` bytes follow it.
#[repr(C)]
struct Header {
    refs: AtomicUsize,
    len: usize,
    cap: usize,
}

const HEADER: usize = std::mem::size_of::<Header>();

/// A reference-counted, growable byte buffer in one allocation (`Header` then `cap` bytes), behind a thin
/// pointer. Like `Arc<Vec<u8>>` without the second indirection: clones share the buffer; writes go in
/// place only while it is unshared, else to a fresh copy.
pub struct SharedBuf {
    ptr: NonNull<Header>,
}

// SAFETY: the buffer is immutable while shared (writes require `refs == 1`, checked with `Acquire`), and the
// reference count is atomic, exactly as for `Arc<[u8]>`.
unsafe impl Send for SharedBuf {}
// SAFETY: as above: `&SharedBuf` only reads the bytes or bumps the atomic count.
unsafe impl Sync for SharedBuf {}

impl SharedBuf {
    fn layout(cap: usize) -> Layout {
        // `HEADER + cap` overflows only for impossible sizes (a slice never exceeds isize::MAX bytes).
        match Layout::from_size_align(HEADER + cap, std::mem::align_of::<Header>()) {
            Ok(l) => l,
            Err(_) => panic!("SmallBytes: buffer of {cap} bytes is too large"),
        }
    }

    /// A new unshared buffer of capacity `cap >= total length of parts` holding `parts` concatenated.
    fn from_parts(parts: &[&[u8]], cap: usize) -> Self {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert!(cap >= len);
        let layout = Self::layout(cap);
        // SAFETY: `layout` has a non-zero size (it includes the header).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Header>()) else {
            handle_alloc_error(layout)
        };
        // SAFETY: `raw` is a fresh allocation of `HEADER + cap` bytes aligned for `Header`; the header is
        // written first, then `len <= cap` bytes right after it, from slices that cannot overlap it.
        unsafe {
            ptr.as_ptr().write(Header {
                refs: AtomicUsize::new(1),
                len,
                cap,
            });
            let mut at = raw.add(HEADER);
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                at = at.add(p.len());
            }
        }
        SharedBuf { ptr }
    }

    #[inline(always)]
    fn header(&self) -> &Header {
        // SAFETY: `ptr` points to a live, initialised header for as long as this handle exists (the count
        // includes this handle).
        unsafe { self.ptr.as_ref() }
    }

    #[inline(always)]
    fn data(&self) -> *mut u8 {
        // SAFETY: the bytes start right after the header, inside the same allocation.
        unsafe { self.ptr.as_ptr().cast::<u8>().add(HEADER) }
    }

    /// The bytes.
    #[inline(always)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes after the header are initialised, and are not written while any
        // other handle exists; this handle is borrowed immutably for the slice's lifetime, so no write
        // through it can happen meanwhile either.
        unsafe { std::slice::from_raw_parts(self.data(), self.header().len) }
    }

    /// Whether this is the only handle (so the bytes may be written in place).
    #[inline]
    fn is_unique(&self) -> bool {
        // `Acquire` pairs with the `Release` decrement of a dropped clone, so its reads happened before
        // any write of ours (as in `Arc::get_mut`).
        self.header().refs.load(Ordering::Acquire) == 1
    }

    /// Replaces the contents with `parts` concatenated (in place when unshared and large enough).
    fn assign(&mut self, parts: &[&[u8]], append: bool) {
        let h = self.header();
        let (len, cap) = (h.len, h.cap);
        let add: usize = parts.iter().map(|p| p.len()).sum();
        let start = if append { len } else { 0 };
        let need = start + add;
        if need <= cap && self.is_unique() {
            // SAFETY: unique handle (no other reader), `need <= cap` bytes fit in the allocation, and the
            // source slices cannot point into this buffer (they are borrowed while `self` is borrowed
            // mutably).
            unsafe {
                let mut at = self.data().add(start);
                for p in parts {
                    std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                    at = at.add(p.len());
                }
                (*self.ptr.as_ptr()).len = need;
            }
            return;
        }
        let fresh = if append {
            let new_cap = need.next_power_of_two().max(need);
            let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
            all.push(self.as_slice());
            all.extend_from_slice(parts);
            SharedBuf::from_parts(&all, new_cap)
        } else {
            SharedBuf::from_parts(parts, need)
        };
        *self = fresh;
    }

    /// Hints the CPU to load the header and the first bytes. Never faults.
    #[inline(always)]
    fn prefetch(&self) {
        let p = self.ptr.as_ptr().cast::<u8>();
        prefetch_read(p);
        prefetch_read(p.wrapping_add(64));
    }
}

impl Clone for SharedBuf {
    #[inline]
    fn clone(&self) -> Self {
        // `Relaxed` is enough for an increment from an existing handle (as in `Arc::clone`).
        let old = self.header().refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            std::process::abort();
        }
        SharedBuf { ptr: self.ptr }
    }
}

impl Drop for SharedBuf {
    #[inline]
    fn drop(&mut self) {
        if self.header().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        // Pairs with the `Release` decrements of the other handles (as in `Arc::drop`).
        fence(Ordering::Acquire);
        let layout = Self::layout(self.header().cap);
        // SAFETY: this was the last handle, so nobody else can reach the allocation; it was allocated
        // with this exact layout (same `cap`) in `from_parts`. `Header` has no drop glue.
        unsafe { dealloc(self.ptr.as_ptr().cast::<u8>(), layout) };
    }
}

impl SmallBytes {
    /// Copies `bytes`.
    #[inline]
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            SmallBytes::Inline {
                len: bytes.len() as u8,
                buf,
            }
        } else {
            SmallBytes::Shared(SharedBuf::from_parts(&[bytes], bytes.len()))
        }
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            SmallBytes::Inline { len, buf } => &buf[..*len as usize],
            SmallBytes::Shared(v) => v.as_slice(),
        }
    }

    /// Number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            SmallBytes::Inline { len, .. } => *len as usize,
            SmallBytes::Shared(v) => v.header().len,
        }
    }

    /// Whether there are no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes held outside this value: 0 when inline, else its buffer's allocation (header and capacity,
    /// rounded up to 16 bytes as allocators round small sizes).
    #[inline]
    pub fn heap_bytes(&self) -> usize {
        match self {
            SmallBytes::Inline { .. } => 0,
            SmallBytes::Shared(v) => (HEADER + v.header().cap).next_multiple_of(16),
        }
    }

    /// What [`heap_bytes`](Self::heap_bytes) becomes after an [`extend`](Self::extend) by `add` bytes of a
    /// handle that is the only one on its buffer (`None`: of absent bytes, which `add` bytes replace).
    pub fn heap_bytes_extended(this: Option<&SmallBytes>, add: usize) -> usize {
        let cap = match this {
            None if add <= INLINE => return 0,
            None => add,
            Some(SmallBytes::Inline { len, .. }) if *len as usize + add <= INLINE => return 0,
            Some(SmallBytes::Inline { len, .. }) => (*len as usize + add).next_power_of_two(),
            Some(SmallBytes::Shared(v)) => {
                let (len, cap) = (v.header().len, v.header().cap);
                if len + add <= cap {
                    cap
                } else {
                    (len + add).next_power_of_two()
                }
            }
        };
        (HEADER + cap).next_multiple_of(16)
    }

    /// The first 8 bytes as a big-endian integer, zero padded ([`head_of`] of the bytes): comparing heads
    /// first, then the bytes, is byte order.
    #[inline]
    pub fn head(&self) -> u64 {
        match self {
            SmallBytes::Inline { len, buf } => {
                let mut h = [0u8; 8];
                h.copy_from_slice(&buf[..8]);
                let h = u64::from_be_bytes(h);
                // Bytes past `len` are not necessarily zero (a shorter `set` leaves them): mask them off.
                match *len {
                    0 => 0,
                    n if n >= 8 => h,
                    n => h & !(u64::MAX >> (8 * n as u32)),
                }
            }
            SmallBytes::Shared(v) => head_of(v.as_slice()),
        }
    }

    /// Replaces the contents, reusing the storage when possible.
    #[inline]
    pub fn set(&mut self, bytes: &[u8]) {
        match self {
            SmallBytes::Inline { len, buf } if bytes.len() <= INLINE => {
                buf[..bytes.len()].copy_from_slice(bytes);
                *len = bytes.len() as u8;
            }
            SmallBytes::Shared(b) if bytes.len() > INLINE => b.assign(&[bytes], false),
            _ => *self = SmallBytes::new(bytes),
        }
    }

    /// Hints the CPU to start loading this `SmallBytes` itself (stage 0: e.g. a table slot). Never faults.
    #[inline(always)]
    pub fn prefetch_slot(&self) {
        prefetch_read(self);
    }

    /// Hints the CPU to start loading what [`as_slice`](Self::as_slice) will read for a shared buffer
    /// (stage 1: reads the slot, so issue [`prefetch_slot`](Self::prefetch_slot) some time before). Inline
    /// bytes need nothing. Never faults.
    #[inline(always)]
    pub fn prefetch_data(&self) {
        if let SmallBytes::Shared(b) = self {
            b.prefetch();
        }
    }

    /// Appends `parts` in order (amortised O(added bytes) while the buffer is not shared).
    pub fn extend(&mut self, parts: &[&[u8]]) {
        let add: usize = parts.iter().map(|p| p.len()).sum();
        match self {
            SmallBytes::Inline { len, buf } if *len as usize + add <= INLINE => {
                let mut at = *len as usize;
                for p in parts {
                    buf[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                *len = at as u8;
            }
            SmallBytes::Inline { len, buf } => {
                let need = *len as usize + add;
                let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                all.push(&buf[..*len as usize]);
                all.extend_from_slice(parts);
                let fresh = SharedBuf::from_parts(&all, need.next_power_of_two());
                *self = SmallBytes::Shared(fresh);
            }
            SmallBytes::Shared(b) => b.assign(parts, true),
        }
    }
}

/// The first 8 bytes of `bytes` as a big-endian integer, zero padded.
#[inline]
pub fn head_of(bytes: &[u8]) -> u64 {
    if let Some(h) = bytes.first_chunk::<8>() {
        return u64::from_be_bytes(*h);
    }
    let mut v = 0u64;
    for (i, b) in bytes.iter().enumerate() {
        v |= (*b as u64) << (56 - 8 * i);
    }
    v
}

impl std::fmt::Debug for SmallBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SmallBytes({:02x?})", self.as_slice())
    }
}

impl PartialEq for SmallBytes {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for SmallBytes {}

impl PartialOrd for SmallBytes {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for SmallBytes {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for SmallBytes {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must equal `<[u8] as Hash>::hash` so lookups by `&[u8]` find entries.
        self.as_slice().hash(state)
    }
}

impl Borrow<[u8]> for SmallBytes {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_shared_transitions() {
        let mut b = SmallBytes::new(b"abc");
        assert!(matches!(b, SmallBytes::Inline { .. }));
        b.extend(&[b",", &[7u8; 30]]);
        assert_eq!(b.as_slice().len(), 34);
        let snapshot = b.clone();
        b.extend(&[b",x"]);
        assert_eq!(snapshot.as_slice().len(), 34);
        assert_eq!(b.as_slice().len(), 36);
        b.set(b"short");
        assert_eq!(b.as_slice(), b"short");
        assert_eq!(std::mem::size_of::<SmallBytes>(), 16);
    }

    /// `head` ignores stale bytes past the length and, compared before the bytes, gives byte order.
    #[test]
    fn head_orders_like_bytes() {
        let mut stale = SmallBytes::new(&[9u8; 12]);
        stale.set(&[1, 2]);
        assert_eq!(stale.head(), head_of(&[1, 2]));
        assert_eq!(stale.head(), 0x0102 << 48);
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![1, 0, 0, 0, 0, 0, 0, 0, 0],
            vec![1, 0, 0, 0, 0, 0, 0, 0, 1],
            vec![255; 8],
            vec![255; 30],
        ];
        for a in &keys {
            for b in &keys {
                let (sa, sb) = (SmallBytes::new(a), SmallBytes::new(b));
                let by_head = sa.head().cmp(&sb.head()).then_with(|| a.cmp(b));
                assert_eq!(by_head, a.cmp(b), "{a:?} vs {b:?}");
                assert!(sa.head() <= sb.head() || a > b);
            }
        }
    }

    /// Shared buffers: writes while shared never show through other handles; unshared writes go in place;
    /// long append chains and cross-thread clones/drops keep the bytes intact.
    #[test]
    fn shared_buffer_semantics() {
        let long: Vec<u8> = (0..100u8).collect();
        let mut a = SmallBytes::new(&long);
        assert!(matches!(a, SmallBytes::Shared(_)));
        assert_eq!(a.as_slice(), &long[..]);
        let b = a.clone();
        a.set(&[9u8; 50]);
        assert_eq!(b.as_slice(), &long[..]);
        assert_eq!(a.as_slice(), &[9u8; 50][..]);
        drop(b);
        // Unique now: an in-place rewrite (same capacity) and a growing one.
        a.set(&[1u8; 40]);
        assert_eq!(a.as_slice(), &[1u8; 40][..]);
        a.set(&[2u8; 300]);
        assert_eq!(a.as_slice(), &[2u8; 300][..]);
        a.set(b"tiny");
        assert!(matches!(a, SmallBytes::Inline { .. }));

        let mut list = SmallBytes::new(b"e");
        let mut expect = b"e".to_vec();
        let mut snaps = Vec::new();
        for i in 0..500u32 {
            let el = i.to_be_bytes();
            list.extend(&[b",", &el]);
            expect.extend_from_slice(b",");
            expect.extend_from_slice(&el);
            if i % 97 == 0 {
                snaps.push((list.clone(), expect.clone()));
            }
        }
        assert_eq!(list.as_slice(), &expect[..]);
        for (s, e) in &snaps {
            assert_eq!(s.as_slice(), &e[..]);
        }

        let shared = SmallBytes::new(&long);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let (s, long) = (&shared, &long);
                scope.spawn(move || {
                    for _ in 0..1000 {
                        let c = s.clone();
                        assert_eq!(c.as_slice(), &long[..]);
                    }
                });
            }
        });
        assert_eq!(shared.as_slice(), &long[..]);
    }

    #[test]
    fn heap_bytes_extended_predicts_the_heap_bytes_after_an_extend() {
        assert_eq!(SmallBytes::heap_bytes_extended(None, 14), 0);
        assert_eq!(
            SmallBytes::heap_bytes_extended(None, 40),
            SmallBytes::new(&[1u8; 40]).heap_bytes()
        );
        let mut b = SmallBytes::new(b"abc");
        for add in [5usize, 7, 30, 1, 100, 3, 900, 900] {
            let predicted = SmallBytes::heap_bytes_extended(Some(&b), add);
            b.extend(&[&vec![9u8; add]]);
            assert_eq!(b.heap_bytes(), predicted, "after adding {add}");
        }
    }
}
