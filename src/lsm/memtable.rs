//! The in-memory write buffer: a lock-free skiplist of internal keys with memory accounting.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;

use super::ikey::{self, ValueKind};
use super::rangedel::RangeTombstone;

/// An internal key as an unsized slice type ordered by [`ikey::compare`]: the skiplist is searched with a
/// borrowed `&IKey`, so lookups build their key on the stack and never allocate.
#[derive(Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct IKey([u8]);

impl IKey {
    /// Views internal-key bytes as an [`IKey`].
    #[inline]
    pub fn new(bytes: &[u8]) -> &IKey {
        // SAFETY: `IKey` is a `repr(transparent)` wrapper around `[u8]`, so both fat pointers have the same
        // layout and metadata, and the lifetime is carried over unchanged.
        unsafe { &*(bytes as *const [u8] as *const IKey) }
    }
}

impl Ord for IKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        ikey::compare(&self.0, &other.0)
    }
}

impl PartialOrd for IKey {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// One memtable entry in a single allocation: `internal key | value`, ordered by its internal key.
///
/// `prefix` holds the first 8 user-key bytes (zero-padded, big-endian) inline in the skiplist node: when two
/// prefixes differ they order the keys (a zero pad only ever stands for "the key ended here", which sorts
/// first), so most comparisons during an insert never dereference `buf`.
#[derive(Debug, Clone)]
pub(crate) struct MemEntry {
    prefix: u64,
    buf: Box<[u8]>,
    klen: usize,
}

/// The first 8 bytes of `user_key`, zero-padded, as a big-endian integer.
#[inline]
fn key_prefix(user_key: &[u8]) -> u64 {
    let mut p = [0u8; 8];
    let n = user_key.len().min(8);
    if let (Some(dst), Some(src)) = (p.get_mut(..n), user_key.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(p)
}

impl MemEntry {
    fn new(user_key: &[u8], seqno: u64, kind: ValueKind, value: &[u8]) -> Self {
        let klen = user_key.len() + ikey::TRAILER_LEN;
        let mut buf = Vec::with_capacity(klen + value.len());
        ikey::encode(&mut buf, user_key, seqno, kind);
        buf.extend_from_slice(value);
        MemEntry {
            prefix: key_prefix(user_key),
            buf: buf.into_boxed_slice(),
            klen,
        }
    }

    /// The internal key.
    #[inline]
    pub fn ikey(&self) -> &[u8] {
        self.buf.get(..self.klen).unwrap_or(&[])
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &[u8] {
        self.buf.get(self.klen..).unwrap_or(&[])
    }
}

impl std::borrow::Borrow<IKey> for MemEntry {
    #[inline]
    fn borrow(&self) -> &IKey {
        IKey::new(self.ikey())
    }
}

impl PartialEq for MemEntry {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for MemEntry {}

impl Ord for MemEntry {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match self.prefix.cmp(&other.prefix) {
            Ordering::Equal => ikey::compare(self.ikey(), other.ikey()),
            o => o,
        }
    }
}

impl PartialOrd for MemEntry {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Per-entry overhead charged on top of key and value bytes (skiplist node, vectors).
const ENTRY_OVERHEAD: usize = 64;

/// A memtable. Entries are never removed; the whole table is dropped after it is flushed.
pub(crate) struct MemTable {
    map: SkipMap<MemEntry, ()>,
    bytes: AtomicUsize,
    max_seqno: AtomicU64,
    range_dels: RwLock<Vec<RangeTombstone>>,
    /// The WAL file that holds this memtable's writes (0 without a WAL).
    pub wal_number: u64,
}

impl MemTable {
    /// An empty memtable logging to WAL `wal_number`.
    pub fn new(wal_number: u64) -> Self {
        Self {
            map: SkipMap::new(),
            bytes: AtomicUsize::new(0),
            max_seqno: AtomicU64::new(0),
            range_dels: RwLock::new(Vec::new()),
            wal_number,
        }
    }

    /// Inserts one entry.
    pub fn add(&self, seqno: u64, kind: ValueKind, key: &[u8], value: &[u8]) {
        if kind == ValueKind::RangeDelete {
            self.range_dels.write().push(RangeTombstone {
                start: key.to_vec(),
                end: value.to_vec(),
                seqno,
            });
        }
        self.bytes.fetch_add(
            key.len() + ikey::TRAILER_LEN + value.len() + ENTRY_OVERHEAD,
            AtomicOrdering::Relaxed,
        );
        self.max_seqno.fetch_max(seqno, AtomicOrdering::Relaxed);
        self.map.insert(MemEntry::new(key, seqno, kind, value), ());
    }

    /// Approximate memory use in bytes.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The largest seqno inserted.
    pub fn max_seqno(&self) -> u64 {
        self.max_seqno.load(AtomicOrdering::Relaxed)
    }

    /// A copy of the range tombstones.
    pub fn range_dels(&self) -> Vec<RangeTombstone> {
        self.range_dels.read().clone()
    }

    /// Calls `f` with the range tombstones.
    pub fn with_range_dels<R>(&self, f: impl FnOnce(&[RangeTombstone]) -> R) -> R {
        f(&self.range_dels.read())
    }

    /// Feeds the versions of `user_key` with seqno `<= snapshot` (newest first) to `f` until it returns false.
    pub fn for_each_version(
        &self,
        user_key: &[u8],
        snapshot: u64,
        mut f: impl FnMut(u64, ValueKind, &[u8]) -> bool,
    ) {
        with_lookup_key(user_key, snapshot, |seek| {
            let lo = Bound::Included(IKey::new(seek));
            for e in self.map.range::<IKey, _>((lo, Bound::Unbounded)) {
                let entry = e.key();
                let Some(p) = ikey::parse(entry.ikey()) else {
                    continue;
                };
                if p.user_key != user_key {
                    break;
                }
                if !f(p.seqno, p.kind, entry.value()) {
                    break;
                }
            }
        })
    }

    /// Up to `limit` entries from internal key `target` on (strictly after it if `exclusive`; from the
    /// start if `target` is `None`), copied out (one allocation per entry).
    pub fn entries_from(
        &self,
        target: Option<&[u8]>,
        exclusive: bool,
        limit: usize,
    ) -> Vec<MemEntry> {
        let lo = match target {
            None => Bound::Unbounded,
            Some(t) if exclusive => Bound::Excluded(IKey::new(t)),
            Some(t) => Bound::Included(IKey::new(t)),
        };
        self.map
            .range::<IKey, _>((lo, Bound::Unbounded))
            .take(limit)
            .map(|e| e.key().clone())
            .collect()
    }

    /// Calls `f` for every entry in internal-key order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> bool) {
        for e in self.map.iter() {
            let entry = e.key();
            if !f(entry.ikey(), entry.value()) {
                break;
            }
        }
    }
}

/// Calls `f` with the internal key that sorts before every version of `user_key` with seqno `<= snapshot`,
/// built on the stack for keys up to 56 bytes.
#[inline]
pub(crate) fn with_lookup_key<R>(user_key: &[u8], snapshot: u64, f: impl FnOnce(&[u8]) -> R) -> R {
    let t = (snapshot.min(ikey::MAX_SEQNO) << 8) | 0xFF;
    let n = user_key.len();
    let mut stack = [0u8; 64];
    if let Some(dst) = stack.get_mut(..n + ikey::TRAILER_LEN) {
        let (k, tr) = dst.split_at_mut(n);
        k.copy_from_slice(user_key);
        tr.copy_from_slice(&t.to_be_bytes());
        return f(dst);
    }
    f(&lookup_key(user_key, snapshot))
}

/// The internal key that sorts before every version of `user_key` with seqno `<= snapshot`.
pub(crate) fn lookup_key(user_key: &[u8], snapshot: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(user_key.len() + ikey::TRAILER_LEN);
    k.extend_from_slice(user_key);
    let t = (snapshot.min(ikey::MAX_SEQNO) << 8) | 0xFF;
    k.extend_from_slice(&t.to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_newest_first_and_snapshot_bounded() {
        let m = MemTable::new(0);
        m.add(1, ValueKind::Put, b"k", b"v1");
        m.add(2, ValueKind::Merge, b"k", b"m2");
        m.add(3, ValueKind::Delete, b"k", b"");
        m.add(4, ValueKind::Put, b"ka", b"x");
        let mut seen = Vec::new();
        m.for_each_version(b"k", 2, |s, k, v| {
            seen.push((s, k, v.to_vec()));
            true
        });
        assert_eq!(
            seen,
            vec![
                (2, ValueKind::Merge, b"m2".to_vec()),
                (1, ValueKind::Put, b"v1".to_vec())
            ]
        );
        assert!(m.approximate_bytes() > 0);
    }

    #[test]
    fn prefix_order_agrees_with_internal_key_order() {
        let keys: [&[u8]; 9] = [
            b"",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"b",
            b"\xff",
        ];
        for x in keys {
            for y in keys {
                for (sx, sy) in [(1, 2), (2, 1), (3, 3)] {
                    let a = MemEntry::new(x, sx, ValueKind::Put, b"");
                    let b = MemEntry::new(y, sy, ValueKind::Put, b"");
                    assert_eq!(a.cmp(&b), ikey::compare(a.ikey(), b.ikey()), "{x:?} {y:?}");
                }
            }
        }
    }
}
