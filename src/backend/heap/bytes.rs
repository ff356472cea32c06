//! [`SmallBytes`]: a byte string stored inline when short (keys and small values), shared when long.
//!
//! Table entries of the heap backend are `(SmallBytes, SmallBytes)`: a typical entry key (`KG | i64 | NS`,
//! 10 bytes) and value (8 bytes) live inside the hash table slot, so a lookup touches one cache line, and a
//! table clone (copy-on-write after a snapshot) copies no heap allocation for them.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

const INLINE: usize = 22;

/// Bytes stored inline up to 22 bytes, else in a shared, growable buffer (cloned only when written while
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
    Shared(Arc<Vec<u8>>),
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
            SmallBytes::Shared(Arc::new(bytes.to_vec()))
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

    /// Replaces the contents, reusing the storage when possible.
    #[inline]
    pub fn set(&mut self, bytes: &[u8]) {
        match self {
            SmallBytes::Inline { len, buf } if bytes.len() <= INLINE => {
                buf[..bytes.len()].copy_from_slice(bytes);
                *len = bytes.len() as u8;
            }
            SmallBytes::Shared(arc) if bytes.len() > INLINE => {
                if let Some(v) = Arc::get_mut(arc) {
                    v.clear();
                    v.extend_from_slice(bytes);
                } else {
                    *arc = Arc::new(bytes.to_vec());
                }
            }
            _ => *self = SmallBytes::new(bytes),
        }
    }

    /// Hints the CPU to start loading this `SmallBytes` itself (stage 0: e.g. a table slot). Never faults.
    #[inline(always)]
    pub fn prefetch_slot(&self) {
        prefetch((self as *const Self).cast());
    }

    /// Hints the CPU to start loading what [`as_slice`](Self::as_slice) will read for a shared buffer: the
    /// buffer's header (stage 1: reads the slot). Inline bytes need nothing. Never faults.
    #[inline(always)]
    pub fn prefetch_header(&self) {
        if let SmallBytes::Shared(arc) = self {
            prefetch(Arc::as_ptr(arc).cast());
        }
    }

    /// Hints the CPU to start loading the first two cache lines of a shared buffer's bytes (stage 2: reads
    /// the header, so issue [`prefetch_header`](Self::prefetch_header) some time before). Never faults.
    #[inline(always)]
    pub fn prefetch_data(&self) {
        if let SmallBytes::Shared(arc) = self {
            let p = arc.as_ptr();
            prefetch(p);
            prefetch(p.wrapping_add(64));
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
                let mut v = Vec::with_capacity((*len as usize + add).next_power_of_two());
                v.extend_from_slice(&buf[..*len as usize]);
                for p in parts {
                    v.extend_from_slice(p);
                }
                *self = SmallBytes::Shared(Arc::new(v));
            }
            SmallBytes::Shared(arc) => {
                let v = Arc::make_mut(arc);
                v.reserve(add);
                for p in parts {
                    v.extend_from_slice(p);
                }
            }
        }
    }
}

/// A read prefetch hint (no-op off x86_64).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and has no effect on program state, whatever `p`.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch(p.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
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
        assert_eq!(std::mem::size_of::<SmallBytes>(), 24);
    }
}
