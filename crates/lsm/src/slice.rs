//! Zero-copy value views: a [`ValueSlice`] is a cheaply clonable, reference-counted view of bytes that keeps
//! its backing storage (a memory-mapped SST file, a cached decompressed block, or an owned buffer) alive.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use memmap2::Mmap;

/// What keeps the bytes of a [`ValueSlice`] alive.
#[derive(Clone)]
enum Owner {
    /// Static bytes.
    Static(&'static [u8]),
    /// An owned vector (no copy on construction).
    Vec(Arc<Vec<u8>>),
    /// A shared buffer, e.g. a decompressed block held by the block cache.
    Shared(Arc<[u8]>),
    /// A memory-mapped immutable file.
    Map(Arc<Mmap>),
}

impl Owner {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            Owner::Static(s) => s,
            Owner::Vec(v) => v.as_slice(),
            Owner::Shared(s) => s,
            Owner::Map(m) => m,
        }
    }
}

/// An immutable byte view that owns (a share of) its backing storage. Clone is O(1) and never copies bytes.
#[derive(Clone)]
pub struct ValueSlice {
    owner: Owner,
    start: usize,
    end: usize,
}

impl ValueSlice {
    /// An empty slice.
    pub fn empty() -> Self {
        Self::from_static(&[])
    }

    /// A view of static bytes.
    pub fn from_static(bytes: &'static [u8]) -> Self {
        ValueSlice {
            owner: Owner::Static(bytes),
            start: 0,
            end: bytes.len(),
        }
    }

    /// Takes ownership of a vector without copying it.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let end = bytes.len();
        ValueSlice {
            owner: Owner::Vec(Arc::new(bytes)),
            start: 0,
            end,
        }
    }

    /// A view of `range` inside a shared buffer; `None` if the range is out of bounds.
    pub fn from_shared(bytes: Arc<[u8]>, range: Range<usize>) -> Option<Self> {
        Self::with_owner(Owner::Shared(bytes), range)
    }

    /// A view of `range` inside a shared vector (e.g. a cached block); `None` if the range is out of bounds.
    pub(crate) fn from_shared_vec(bytes: Arc<Vec<u8>>, range: Range<usize>) -> Option<Self> {
        Self::with_owner(Owner::Vec(bytes), range)
    }

    /// A view of `range` inside a memory map; `None` if the range is out of bounds.
    pub(crate) fn from_map(map: Arc<Mmap>, range: Range<usize>) -> Option<Self> {
        Self::with_owner(Owner::Map(map), range)
    }

    fn with_owner(owner: Owner, range: Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > owner.bytes().len() {
            return None;
        }
        Some(ValueSlice {
            owner,
            start: range.start,
            end: range.end,
        })
    }

    /// A sub-view of `range` (relative to this view); `None` if the range is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<Self> {
        if range.start > range.end || range.end > self.end - self.start {
            return None;
        }
        Some(ValueSlice {
            owner: self.owner.clone(),
            start: self.start + range.start,
            end: self.start + range.end,
        })
    }

    /// Whether the bytes are a view into a memory-mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.owner, Owner::Map(_))
    }

    /// Copies the bytes into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.deref().to_vec()
    }
}

impl Deref for ValueSlice {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        // The range was checked against the owner's length at construction and the owner is immutable.
        self.owner.bytes().get(self.start..self.end).unwrap_or(&[])
    }
}

impl AsRef<[u8]> for ValueSlice {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Default for ValueSlice {
    fn default() -> Self {
        Self::empty()
    }
}

impl PartialEq for ValueSlice {
    fn eq(&self, other: &Self) -> bool {
        self.deref() == other.deref()
    }
}

impl Eq for ValueSlice {}

impl PartialEq<[u8]> for ValueSlice {
    fn eq(&self, other: &[u8]) -> bool {
        self.deref() == other
    }
}

impl fmt::Debug for ValueSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ValueSlice")
            .field("len", &self.len())
            .field("mapped", &self.is_mapped())
            .finish()
    }
}

impl From<Vec<u8>> for ValueSlice {
    fn from(v: Vec<u8>) -> Self {
        Self::from_vec(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_and_subviews() {
        let s = ValueSlice::from_vec(b"hello world".to_vec());
        assert_eq!(&*s, b"hello world");
        let w = s.slice(6..11).unwrap();
        assert_eq!(&*w, b"world");
        assert_eq!(&*w.slice(1..3).unwrap(), b"or");
        assert!(w.slice(3..9).is_none());
        assert!(ValueSlice::empty().is_empty());
        let sh: Arc<[u8]> = Arc::from(&b"abc"[..]);
        assert_eq!(&*ValueSlice::from_shared(sh.clone(), 1..3).unwrap(), b"bc");
        assert!(ValueSlice::from_shared(sh, 2..4).is_none());
    }
}
