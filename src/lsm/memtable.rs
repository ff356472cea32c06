//! The in-memory write buffer: a lock-free skiplist of internal keys with memory accounting.
//!
//! Entries live *inside* the skiplist nodes: an entry whose internal key and value fit in
//! [`INLINE_CAP`] bytes (every entry of the state backends' fixed-width keys) is stored inline, so an insert
//! is one allocation (the node) and a search step touches one node, not a node plus a separate key buffer.
//! Searches build their probe entry on the stack. Readers walk the list with an epoch guard (no reference
//! counting per step); [`MemCursor`] is a reference-counted cursor for iterators that outlive a guard.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

pub(crate) use crossbeam_epoch as epoch;
use crossbeam_skiplist::base::{Entry, RefEntry, SkipList};
use parking_lot::RwLock;

use super::arena::{Arena, ArenaBytes};
use super::ikey::{self, ValueKind};
use super::rangedel::RangeTombstone;

/// Bytes of `internal key | value` stored inline in a skiplist node (keeps [`MemEntry`] at 40 bytes).
pub(crate) const INLINE_CAP: usize = 37;

/// Internal-key bytes kept inline by [`MemEntry::KeyInline`] (user keys up to 14 bytes).
pub(crate) const KEY_INLINE_CAP: usize = 22;

/// One memtable entry, `internal key | value`, ordered by its internal key ([`ikey::compare`]).
///
/// The internal key stays inside the skiplist node whenever it is short, so comparisons during a search never
/// leave the node; only the value of a large entry, or the whole of an entry with a long key, is on the heap.
#[derive(Debug)]
pub(crate) enum MemEntry {
    /// Key and value inline (no allocation besides the skiplist node).
    Inline {
        /// Internal-key length.
        klen: u8,
        /// Value length.
        vlen: u8,
        /// `internal key | value | unused`.
        buf: [u8; INLINE_CAP],
    },
    /// A short key inline, the value in the memtable's arena.
    KeyInline {
        /// Internal-key length.
        klen: u8,
        /// `internal key | unused`.
        key: [u8; KEY_INLINE_CAP],
        /// The value.
        value: ArenaBytes,
    },
    /// A long key: `internal key | value` in the memtable's arena, and the first 8 user-key bytes inline.
    Heap {
        /// Internal-key length.
        klen: u32,
        /// [`key_word`] of the user key: orders most pairs of entries without reading `buf`.
        word: u64,
        /// `internal key | value`.
        buf: ArenaBytes,
    },
    /// As `Heap`, in a buffer of its own: search probes and entries built outside a memtable.
    Owned {
        /// Internal-key length.
        klen: u32,
        /// [`key_word`] of the user key.
        word: u64,
        /// `internal key | value`.
        buf: Box<[u8]>,
    },
}

impl MemEntry {
    /// An entry `user_key | trailer | value` that owns its bytes (inline, or one buffer of its own).
    fn new(user_key: &[u8], trailer: u64, value: &[u8]) -> Self {
        if let Some(e) = Self::inline(user_key, trailer, value) {
            return e;
        }
        let klen = user_key.len() + ikey::TRAILER_LEN;
        let mut buf = Vec::with_capacity(klen + value.len());
        buf.extend_from_slice(user_key);
        buf.extend_from_slice(&trailer.to_be_bytes());
        buf.extend_from_slice(value);
        MemEntry::Owned {
            klen: klen as u32,
            word: key_word(user_key),
            buf: buf.into_boxed_slice(),
        }
    }

    /// An entry `user_key | trailer | value` whose bytes that do not fit in the node go to `arena`.
    fn new_in(user_key: &[u8], trailer: u64, value: &[u8], arena: &Arena) -> Self {
        if let Some(e) = Self::inline(user_key, trailer, value) {
            return e;
        }
        let klen = user_key.len() + ikey::TRAILER_LEN;
        if klen <= KEY_INLINE_CAP {
            let mut key = [0u8; KEY_INLINE_CAP];
            let (k, rest) = key.split_at_mut(user_key.len());
            k.copy_from_slice(user_key);
            if let Some(t) = rest.get_mut(..ikey::TRAILER_LEN) {
                t.copy_from_slice(&trailer.to_be_bytes());
            }
            return MemEntry::KeyInline {
                klen: klen as u8,
                key,
                value: arena.copy(&[value]),
            };
        }
        MemEntry::Heap {
            klen: klen as u32,
            word: key_word(user_key),
            buf: arena.copy(&[user_key, &trailer.to_be_bytes(), value]),
        }
    }

    /// The entry with key and value inside the node, if they fit.
    #[inline]
    fn inline(user_key: &[u8], trailer: u64, value: &[u8]) -> Option<Self> {
        let klen = user_key.len() + ikey::TRAILER_LEN;
        if klen + value.len() > INLINE_CAP {
            return None;
        }
        let mut buf = [0u8; INLINE_CAP];
        let (k, rest) = buf.split_at_mut(user_key.len());
        k.copy_from_slice(user_key);
        let (t, rest) = rest.split_at_mut(ikey::TRAILER_LEN);
        t.copy_from_slice(&trailer.to_be_bytes());
        if let Some(v) = rest.get_mut(..value.len()) {
            v.copy_from_slice(value);
        }
        // Both fit in a u8: klen + vlen <= INLINE_CAP < 256.
        Some(MemEntry::Inline {
            klen: klen as u8,
            vlen: value.len() as u8,
            buf,
        })
    }

    /// The probe that sorts before every version of `user_key` with seqno `<= snapshot`.
    #[inline]
    fn probe(user_key: &[u8], snapshot: u64) -> Self {
        Self::new(user_key, (snapshot.min(ikey::MAX_SEQNO) << 8) | 0xFF, &[])
    }

    /// The probe equal to internal key `ikey` (a seek target).
    #[inline]
    fn probe_ikey(ikey: &[u8]) -> Self {
        let split = ikey.len().saturating_sub(ikey::TRAILER_LEN);
        let (uk, t) = ikey.split_at(split);
        match <[u8; 8]>::try_from(t) {
            Ok(t) => Self::new(uk, u64::from_be_bytes(t), &[]),
            // Not a whole internal key (never produced by the engine): compare it as given.
            Err(_) => MemEntry::Owned {
                klen: ikey.len() as u32,
                word: key_word(ikey::user_key(ikey)),
                buf: ikey.into(),
            },
        }
    }

    /// The internal key.
    #[inline]
    pub fn ikey(&self) -> &[u8] {
        match self {
            MemEntry::Inline { klen, buf, .. } => buf.get(..usize::from(*klen)).unwrap_or(&[]),
            MemEntry::KeyInline { klen, key, .. } => key.get(..usize::from(*klen)).unwrap_or(&[]),
            // SAFETY: an arena-backed entry only exists inside the memtable that owns the arena, and is only
            // reached through a borrow of (or an `Arc` on) that memtable.
            MemEntry::Heap { klen, buf, .. } => unsafe { buf.as_slice() }
                .get(..*klen as usize)
                .unwrap_or(&[]),
            MemEntry::Owned { klen, buf, .. } => buf.get(..*klen as usize).unwrap_or(&[]),
        }
    }

    /// The value.
    #[inline]
    pub fn value(&self) -> &[u8] {
        match self {
            MemEntry::Inline { klen, vlen, buf } => {
                let k = usize::from(*klen);
                buf.get(k..k + usize::from(*vlen)).unwrap_or(&[])
            }
            // SAFETY: as in `ikey`.
            MemEntry::KeyInline { value, .. } => unsafe { value.as_slice() },
            // SAFETY: as in `ikey`.
            MemEntry::Heap { klen, buf, .. } => unsafe { buf.as_slice() }
                .get(*klen as usize..)
                .unwrap_or(&[]),
            MemEntry::Owned { klen, buf, .. } => buf.get(*klen as usize..).unwrap_or(&[]),
        }
    }

    /// [`key_word`] of the user key (without touching the heap).
    #[inline]
    fn first_word(&self) -> u64 {
        match self {
            MemEntry::Heap { word, .. } | MemEntry::Owned { word, .. } => *word,
            _ => key_word(ikey::user_key(self.ikey())),
        }
    }

    /// The inline first word of a long key's user key, if this is one.
    #[inline]
    fn heap_word(&self) -> Option<u64> {
        match self {
            MemEntry::Heap { word, .. } | MemEntry::Owned { word, .. } => Some(*word),
            _ => None,
        }
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
        // A long key's first word is inline: compare words before reading its heap buffer (a zero pad only
        // ever stands for "the key ended here", so different words order the keys).
        if self.heap_word().is_some() || other.heap_word().is_some() {
            let (x, y) = (self.first_word(), other.first_word());
            if x != y {
                return x.cmp(&y);
            }
        }
        compare_ikeys(self.ikey(), other.ikey())
    }
}

/// [`ikey::compare`] for the skiplist's hot loop: user keys compared 8 bytes at a time as big-endian words
/// (the state backends' keys share long prefixes — state id, key group, the high bytes of an i64 key — so
/// most comparisons run past the first word), the tail zero-padded into one word; no `memcmp` call.
#[inline]
fn compare_ikeys(a: &[u8], b: &[u8]) -> Ordering {
    let (ua, ta) = a.split_at(a.len().saturating_sub(ikey::TRAILER_LEN));
    let (ub, tb) = b.split_at(b.len().saturating_sub(ikey::TRAILER_LEN));
    match compare_user_keys(ua, ub) {
        Ordering::Equal => match (<[u8; 8]>::try_from(ta), <[u8; 8]>::try_from(tb)) {
            (Ok(x), Ok(y)) => u64::from_be_bytes(y).cmp(&u64::from_be_bytes(x)),
            _ => tb.cmp(ta),
        },
        o => o,
    }
}

/// Bytewise comparison, equal to `a.cmp(b)`, one big-endian word at a time.
#[inline]
fn compare_user_keys(mut a: &[u8], mut b: &[u8]) -> Ordering {
    while let (Some((x, ra)), Some((y, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if x != y {
            return u64::from_be_bytes(*x).cmp(&u64::from_be_bytes(*y));
        }
        (a, b) = (ra, rb);
    }
    // At least one side has fewer than 8 bytes left: zero-padded words decide unless one is a prefix of
    // the other (a pad byte only ever stands for "ended here"), then the shorter sorts first.
    match key_word(a).cmp(&key_word(b)) {
        Ordering::Equal => a.len().cmp(&b.len()),
        o => o,
    }
}

/// The first 8 bytes of `bytes`, zero-padded, as a big-endian word.
#[inline]
fn key_word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = bytes.len().min(8);
    if let (Some(dst), Some(src)) = (w.get_mut(..n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    u64::from_be_bytes(w)
}

impl PartialOrd for MemEntry {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Bytes a skiplist node costs beyond its [`MemEntry`]: reference count and height (8), the tower (8 per
/// level, 2 levels on average), the allocator's header and rounding (measured: `memtable_bytes_per_entry`).
const NODE_OVERHEAD: usize = 35;

/// The memory an entry with an internal key of `klen` bytes and a value of `vlen` bytes takes: its node,
/// plus the bytes it copies into the arena (as [`MemEntry::new_in`] lays it out). The arena's chunks are
/// 1/64 of the memtable (at most 1 MiB), so their unused tails add at most a few percent.
#[inline]
fn charge(klen: usize, vlen: usize) -> usize {
    let node = std::mem::size_of::<MemEntry>() + NODE_OVERHEAD;
    if klen + vlen <= INLINE_CAP {
        node
    } else if klen <= KEY_INLINE_CAP {
        node + vlen
    } else {
        node + klen + vlen
    }
}

/// A lock-free register-blocked Bloom filter over a memtable's user keys: each key sets up to
/// [`BLOOM_PROBES`] bits in one 64-bit word, so a check is one load and an insert at most one atomic OR —
/// instead of a skiplist search (many node visits, each a likely cache miss) when the key is not in the
/// table, the common case for every memtable but the one holding a key's newest version.
struct MemBloom {
    words: Box<[AtomicU64]>,
}

/// Bits set per key (within one 64-bit word; fewer when two probes coincide).
const BLOOM_PROBES: u32 = 6;

/// The hash a [`MemBloom`] is probed with (computed once per lookup, shared by all memtables).
#[inline]
pub(crate) fn bloom_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

impl MemBloom {
    /// A filter with `bits` bits (rounded up to whole words, at least one).
    fn new(bits: usize) -> Self {
        let n = bits.div_ceil(64).max(1);
        MemBloom {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The word and the bit mask of hash `h`.
    #[inline]
    fn slot(&self, h: u64) -> (&AtomicU64, u64) {
        // fastrange on the low 32 bits picks the word; 6-bit groups of a remixed hash pick the bits.
        let i = ((h & 0xFFFF_FFFF) * self.words.len() as u64) >> 32;
        let word = self
            .words
            .get(i as usize)
            .or_else(|| self.words.first())
            .unwrap_or(&EMPTY_WORD);
        let x = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mask = (0..BLOOM_PROBES).fold(0u64, |m, j| m | 1 << ((x >> (28 + 6 * j)) & 63));
        (word, mask)
    }

    #[inline]
    fn may_contain(&self, h: u64) -> bool {
        let (word, mask) = self.slot(h);
        word.load(AtomicOrdering::Relaxed) & mask == mask
    }

    /// Bytes allocated.
    fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// Never used (a filter has at least one word); keeps the probe path free of panics.
static EMPTY_WORD: AtomicU64 = AtomicU64::new(0);

/// A memtable. Entries are never removed; the whole table is dropped after it is flushed.
pub(crate) struct MemTable {
    /// Declared before `arena`, so it is dropped first (entries point into the arena; dropping them never
    /// reads those bytes, but the order keeps every view valid for as long as its entry exists).
    list: SkipList<MemEntry, ()>,
    /// Bytes of entries too large for their node.
    arena: Arena,
    bytes: AtomicUsize,
    max_seqno: AtomicU64,
    range_dels: RwLock<Vec<RangeTombstone>>,
    /// Number of range tombstones, read without the lock (most memtables hold none).
    range_del_count: AtomicUsize,
    /// Filter over the user keys of point entries (`None`: off).
    bloom: Option<MemBloom>,
    /// The WAL file that holds this memtable's writes (0 without a WAL).
    pub wal_number: u64,
}

impl MemTable {
    /// An empty memtable logging to WAL `wal_number`, without a key filter.
    pub fn new(wal_number: u64) -> Self {
        Self::with_bloom(wal_number, 0, 0)
    }

    /// An empty memtable logging to WAL `wal_number` with a key filter of `bits_per_key` bits for the
    /// entries `capacity_bytes` holds (0: no filter). The filter's memory is charged to the table.
    pub fn with_bloom(wal_number: u64, capacity_bytes: usize, bits_per_key: usize) -> Self {
        let bloom = (bits_per_key > 0 && capacity_bytes > 0)
            .then(|| MemBloom::new(capacity_bytes / charge(0, 0) * bits_per_key));
        Self {
            list: SkipList::new(epoch::default_collector().clone()),
            arena: Arena::new((capacity_bytes / 64).clamp(4 << 10, 1 << 20)),
            bytes: AtomicUsize::new(bloom.as_ref().map_or(0, MemBloom::bytes)),
            bloom,
            max_seqno: AtomicU64::new(0),
            range_dels: RwLock::new(Vec::new()),
            range_del_count: AtomicUsize::new(0),
            wal_number,
        }
    }

    /// Inserts one entry.
    pub fn add(&self, seqno: u64, kind: ValueKind, key: &[u8], value: &[u8]) {
        if kind == ValueKind::RangeDelete {
            let mut t = self.range_dels.write();
            t.push(RangeTombstone {
                start: key.to_vec(),
                end: value.to_vec(),
                seqno,
            });
            self.range_del_count.store(t.len(), AtomicOrdering::Release);
        }
        self.bytes.fetch_add(
            charge(key.len() + ikey::TRAILER_LEN, value.len()),
            AtomicOrdering::Relaxed,
        );
        self.max_seqno.fetch_max(seqno, AtomicOrdering::Relaxed);
        // Load the filter word first (its cache miss overlaps the skiplist insert); set the bits after the
        // insert, still before the caller publishes the write's seqno — readers see both or neither.
        let filter = match &self.bloom {
            Some(b) if kind != ValueKind::RangeDelete => {
                let (word, mask) = b.slot(bloom_hash(key));
                Some((word, mask, word.load(AtomicOrdering::Relaxed)))
            }
            _ => None,
        };
        let entry = MemEntry::new_in(key, ikey::trailer(seqno, kind), value, &self.arena);
        let guard = epoch::pin();
        self.list.insert(entry, (), &guard).release(&guard);
        if let Some((word, mask, seen)) = filter {
            // Bits are only ever set, so bits already seen set are still set.
            if seen & mask != mask {
                word.fetch_or(mask, AtomicOrdering::Relaxed);
            }
        }
    }

    /// Approximate memory use in bytes: what the entries' nodes and buffers take from the allocator.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The largest seqno inserted.
    pub fn max_seqno(&self) -> u64 {
        self.max_seqno.load(AtomicOrdering::Relaxed)
    }

    /// False if no point entry of the user key with hash `h` ([`bloom_hash`]) is in the table; true if
    /// one may be (or the table has no filter). Range tombstones are not in the filter.
    #[inline]
    pub fn may_contain(&self, h: u64) -> bool {
        self.bloom.as_ref().is_none_or(|b| b.may_contain(h))
    }

    /// Whether the table has a key filter.
    #[inline]
    pub fn has_bloom(&self) -> bool {
        self.bloom.is_some()
    }

    /// Whether the table holds a range tombstone.
    #[inline]
    pub fn has_range_dels(&self) -> bool {
        self.range_del_count.load(AtomicOrdering::Acquire) > 0
    }

    /// A copy of the range tombstones.
    pub fn range_dels(&self) -> Vec<RangeTombstone> {
        if !self.has_range_dels() {
            return Vec::new();
        }
        self.range_dels.read().clone()
    }

    /// Calls `f` with the range tombstones (without taking the lock when there are none).
    #[inline]
    pub fn with_range_dels<R>(&self, f: impl FnOnce(&[RangeTombstone]) -> R) -> R {
        if !self.has_range_dels() {
            return f(&[]);
        }
        f(&self.range_dels.read())
    }

    /// The versions of `user_key` with seqno `<= snapshot`, newest first, borrowed for the guard's lifetime
    /// (entries are never removed, so the bytes stay valid while the table and the guard live).
    #[inline]
    pub fn versions<'g>(
        &'g self,
        user_key: &'g [u8],
        snapshot: u64,
        guard: &'g epoch::Guard,
    ) -> Versions<'g> {
        let probe = MemEntry::probe(user_key, snapshot);
        Versions {
            cur: self.list.lower_bound(Bound::Included(&probe), guard),
            advance: false,
            user_key,
        }
    }

    /// Feeds the versions of `user_key` with seqno `<= snapshot` (newest first) to `f` until it returns false.
    #[cfg(test)]
    pub fn for_each_version(
        &self,
        user_key: &[u8],
        snapshot: u64,
        mut f: impl FnMut(u64, ValueKind, &[u8]) -> bool,
    ) {
        let guard = epoch::pin();
        for (seqno, kind, value) in self.versions(user_key, snapshot, &guard) {
            if !f(seqno, kind, value) {
                break;
            }
        }
    }

    /// Calls `f` for every entry (internal key, value) in internal-key order; stops at the first error.
    pub fn try_for_each<E>(
        &self,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let guard = epoch::pin();
        let mut cur = self.list.front(&guard);
        while let Some(e) = cur {
            let entry = e.key();
            f(entry.ikey(), entry.value())?;
            cur = e.next();
        }
        Ok(())
    }
}

/// Iterator returned by [`MemTable::versions`]: `(seqno, kind, value)`, newest first. It steps to the next
/// node only when asked for the next version (a lookup that stops at the newest one makes no extra hop).
pub(crate) struct Versions<'g> {
    /// The entry to yield next, or (with `advance`) the one yielded last.
    cur: Option<Entry<'g, 'g, MemEntry, ()>>,
    advance: bool,
    user_key: &'g [u8],
}

impl<'g> Iterator for Versions<'g> {
    type Item = (u64, ValueKind, &'g [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.advance {
                self.cur = self.cur.take()?.next();
            }
            self.advance = true;
            let entry: &'g MemEntry = self.cur.as_ref()?.key();
            let Some(p) = ikey::parse(entry.ikey()) else {
                continue;
            };
            if p.user_key != self.user_key {
                self.cur = None;
                return None;
            }
            return Some((p.seqno, p.kind, entry.value()));
        }
    }
}

/// A forward cursor over a memtable that owns a share of it and can outlive any epoch guard: it holds a
/// reference count on its current node (entries are never removed, so a step is one pointer hop), and
/// copies nothing out.
pub(crate) struct MemCursor {
    /// The current node. Declared before `mem` so it is released while the table is still alive.
    cur: Option<RefEntry<'static, MemEntry, ()>>,
    mem: Arc<MemTable>,
}

impl MemCursor {
    /// An unpositioned cursor over `mem`.
    pub fn new(mem: Arc<MemTable>) -> Self {
        Self { cur: None, mem }
    }

    /// Makes `next` (an entry of `self.mem.list`) the current entry, releasing the previous one.
    fn set(&mut self, next: Option<RefEntry<'static, MemEntry, ()>>, guard: &epoch::Guard) {
        if let Some(old) = std::mem::replace(&mut self.cur, next) {
            old.release(guard);
        }
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        let guard = epoch::pin();
        let first = detach(self.mem.list.front(&guard).and_then(|e| e.pin()));
        self.set(first, &guard);
    }

    /// Positions at the first entry whose internal key is `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        let probe = MemEntry::probe_ikey(target);
        let guard = epoch::pin();
        let found = self
            .mem
            .list
            .lower_bound(Bound::Included(&probe), &guard)
            .and_then(|e| e.pin());
        let found = detach(found);
        self.set(found, &guard);
    }

    /// Advances to the next entry.
    pub fn next(&mut self) {
        let guard = epoch::pin();
        let next = detach(self.cur.as_ref().and_then(|c| c.next(&guard)));
        self.set(next, &guard);
    }

    /// The current entry.
    #[inline]
    pub fn entry(&self) -> Option<&MemEntry> {
        self.cur.as_ref().map(|e| e.key())
    }
}

/// Extends the lifetime of an entry of a [`MemCursor`]'s own table to `'static`, so the cursor can hold it
/// next to the `Arc` that keeps the table alive.
#[inline]
fn detach(e: Option<RefEntry<'_, MemEntry, ()>>) -> Option<RefEntry<'static, MemEntry, ()>> {
    // SAFETY: only called on entries of `MemCursor::mem.list`, which lives inside the `Arc` allocation the
    // cursor holds (never replaced) for as long as the cursor exists, so the list and the node (entries are
    // never removed; the reference count pins it anyway) outlive the entry. The `'static` lifetime never
    // escapes: `MemCursor::entry` hands out borrows of the cursor, and the entry is released (in `set` or
    // `Drop`) before `mem` is dropped (`Drop` runs before fields are dropped). Only the lifetime changes.
    unsafe { std::mem::transmute::<Option<RefEntry<'_, MemEntry, ()>>, _>(e) }
}

impl Drop for MemCursor {
    fn drop(&mut self) {
        if let Some(e) = self.cur.take() {
            e.release_with_pin(epoch::pin);
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
    fn word_comparison_agrees_with_bytewise() {
        let keys: [&[u8]; 14] = [
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefghabcdefgh",
            b"abcdefghabcdefgh\0",
            b"abcdefghabcdefgi",
            b"abcdefghabcdefg",
            b"b",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        for x in keys {
            for y in keys {
                assert_eq!(compare_user_keys(x, y), x.cmp(y), "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn entry_order_agrees_with_internal_key_order() {
        let long = |p: &[u8]| {
            let mut k = p.to_vec();
            k.resize(40, b'~');
            k
        };
        let mut keys: Vec<Vec<u8>> = [
            &b""[..],
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"b",
            b"\xff",
        ]
        .iter()
        .map(|k| k.to_vec())
        .collect();
        for p in [&b""[..], b"a", b"abcdefgh", b"abcdefgi", b"b"] {
            keys.push(long(p));
        }
        // Inline, key-inline (large value) and heap entries against each other.
        for x in &keys {
            for y in &keys {
                for (sx, sy) in [(1, 2), (2, 1), (3, 3)] {
                    for (vx, vy) in [(0, 0), (0, 100), (100, 0), (100, 100)] {
                        let a = MemEntry::new(x, ikey::trailer(sx, ValueKind::Put), &vec![1; vx]);
                        let b = MemEntry::new(y, ikey::trailer(sy, ValueKind::Put), &vec![2; vy]);
                        assert_eq!(a.cmp(&b), ikey::compare(a.ikey(), b.ikey()), "{x:?} {y:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn entry_stays_small_and_long_entries_go_to_the_arena() {
        assert_eq!(std::mem::size_of::<MemEntry>(), 40);
        let arena = Arena::new(4096);
        let short = MemEntry::new_in(b"key", ikey::trailer(7, ValueKind::Put), b"value", &arena);
        assert!(matches!(short, MemEntry::Inline { .. }));
        let long_key = vec![b'k'; 60];
        let long = MemEntry::new_in(&long_key, ikey::trailer(7, ValueKind::Put), b"v", &arena);
        assert!(matches!(long, MemEntry::Heap { .. }));
        // Outside a memtable (search probes) a long entry owns its buffer.
        let probe = MemEntry::new(&long_key, ikey::trailer(7, ValueKind::Put), b"v");
        assert!(matches!(probe, MemEntry::Owned { .. }));
        assert_eq!((probe.ikey(), probe.value()), (long.ikey(), long.value()));
        for e in [&short, &long] {
            assert_eq!(ikey::parse(e.ikey()).map(|p| p.seqno), Some(7));
        }
        assert_eq!(short.value(), b"value");
        assert_eq!(long.value(), b"v");
        // Exactly at the inline capacity, and one byte over.
        let k = vec![1u8; INLINE_CAP - ikey::TRAILER_LEN - 4];
        let at = MemEntry::new_in(&k, 1, b"abcd", &arena);
        let over = MemEntry::new_in(&k, 1, b"abcde", &arena);
        assert!(matches!(at, MemEntry::Inline { .. }));
        assert!(matches!(over, MemEntry::Heap { .. }));
        assert_eq!((at.value(), over.value()), (&b"abcd"[..], &b"abcde"[..]));
        // A short key with a large value keeps the key inline, at the key capacity and one byte over.
        let k = vec![2u8; KEY_INLINE_CAP - ikey::TRAILER_LEN];
        let big = vec![9u8; 100];
        let key_inline = MemEntry::new_in(&k, ikey::trailer(3, ValueKind::Merge), &big, &arena);
        assert!(matches!(key_inline, MemEntry::KeyInline { .. }));
        assert_eq!(ikey::user_key(key_inline.ikey()), &k[..]);
        assert_eq!(key_inline.value(), &big[..]);
        let k2 = vec![2u8; KEY_INLINE_CAP - ikey::TRAILER_LEN + 1];
        let heap = MemEntry::new_in(&k2, 3, &big, &arena);
        assert!(matches!(heap, MemEntry::Heap { .. }));
        assert_eq!(
            (ikey::user_key(heap.ikey()), heap.value()),
            (&k2[..], &big[..])
        );
    }

    #[test]
    fn lookups_and_cursor_mix_inline_and_heap_entries() {
        let m = Arc::new(MemTable::new(0));
        let keys: Vec<Vec<u8>> = (0..200u32)
            .map(|i| {
                let mut k = format!("k{i:04}").into_bytes();
                if i % 3 == 0 {
                    k.resize(80, b'x'); // heap entry
                }
                k
            })
            .collect();
        for (i, k) in keys.iter().enumerate() {
            m.add(2 * i as u64 + 1, ValueKind::Put, k, b"old");
            let big = vec![b'v'; 100 * (i % 2)];
            m.add(2 * i as u64 + 2, ValueKind::Put, k, &big);
        }
        for (i, k) in keys.iter().enumerate() {
            let guard = epoch::pin();
            let vs: Vec<(u64, Vec<u8>)> = m
                .versions(k, u64::MAX, &guard)
                .map(|(s, _, v)| (s, v.to_vec()))
                .collect();
            assert_eq!(vs.len(), 2);
            assert_eq!(vs[0], (2 * i as u64 + 2, vec![b'v'; 100 * (i % 2)]));
            assert_eq!(vs[1], (2 * i as u64 + 1, b"old".to_vec()));
            // Bounded by the snapshot: only the older version.
            let old: Vec<u64> = m
                .versions(k, 2 * i as u64 + 1, &guard)
                .map(|v| v.0)
                .collect();
            assert_eq!(old, vec![2 * i as u64 + 1]);
        }
        let mut c = MemCursor::new(Arc::clone(&m));
        c.seek_to_first();
        let mut n = 0;
        let mut prev: Option<Vec<u8>> = None;
        while let Some(e) = c.entry() {
            if let Some(p) = &prev {
                assert_eq!(ikey::compare(p, e.ikey()), Ordering::Less);
            }
            prev = Some(e.ikey().to_vec());
            n += 1;
            c.next();
        }
        assert_eq!(n, 400);
        // Seek to a long key between its versions (7 and 8), then below both (to the next key).
        c.seek(&lookup_key(&keys[3], 7));
        let p = c
            .entry()
            .and_then(|e| ikey::parse(e.ikey()).map(|p| p.seqno));
        assert_eq!(p, Some(7));
        c.seek(&lookup_key(&keys[3], 6));
        let p = c
            .entry()
            .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
        assert_eq!(p, Some((keys[4].clone(), 10)));
    }

    #[test]
    fn cursor_keeps_its_table_alive_and_sees_later_inserts_ahead() {
        let m = Arc::new(MemTable::new(0));
        for i in (0..100u64).step_by(2) {
            m.add(i + 1, ValueKind::Put, format!("k{i:03}").as_bytes(), b"v");
        }
        let mut c = MemCursor::new(Arc::clone(&m));
        c.seek(&lookup_key(b"k050", u64::MAX));
        // Inserts after the cursor's position become visible as it advances (the table is append-only).
        m.add(1000, ValueKind::Put, b"k051", b"new");
        drop(m);
        let mut seen = Vec::new();
        while let Some(e) = c.entry() {
            seen.push(ikey::user_key(e.ikey()).to_vec());
            c.next();
        }
        assert_eq!(seen.first().map(Vec::as_slice), Some(&b"k050"[..]));
        assert_eq!(seen.get(1).map(Vec::as_slice), Some(&b"k051"[..]));
        assert_eq!(seen.len(), 26);
        // Stepping past the end stays at the end; dropping the cursor frees the table.
        c.next();
        assert!(c.entry().is_none());
    }

    /// Heap bytes per entry actually allocated (glibc `mallinfo2`), for the memory accounting: run with
    /// `cargo test --release --lib memtable_bytes_per_entry -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn memtable_bytes_per_entry() {
        for (klen, vlen) in [(12usize, 8usize), (20, 9), (10, 100), (40, 100)] {
            // SAFETY: `mallinfo2` only reads allocator statistics.
            let before = unsafe { libc::mallinfo2() }.uordblks;
            let m = MemTable::new(0);
            let n = 500_000u64;
            let mut key = vec![0u8; klen];
            let value = vec![7u8; vlen];
            for i in 0..n {
                key[klen - 8..]
                    .copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
                m.add(i + 1, ValueKind::Put, &key, &value);
            }
            // SAFETY: as above.
            let after = unsafe { libc::mallinfo2() }.uordblks;
            let (allocated, charged) = (
                (after - before) as f64 / n as f64,
                m.approximate_bytes() as f64 / n as f64,
            );
            println!("key {klen} value {vlen}: {allocated:.1} bytes/entry allocated, {charged:.1} charged");
            assert!((charged / allocated - 1.0).abs() < 0.05);
        }
    }

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let m = MemTable::with_bloom(0, 64 << 10, 10);
        let n = (64 << 10) / charge(0, 0);
        for i in 0..n as u64 {
            m.add(i + 1, ValueKind::Put, &i.to_be_bytes(), b"v");
        }
        for i in 0..n as u64 {
            assert!(m.may_contain(bloom_hash(&i.to_be_bytes())), "{i}");
        }
        let fp = (n as u64..n as u64 + 10_000)
            .filter(|i| m.may_contain(bloom_hash(&i.to_be_bytes())))
            .count();
        println!("memtable filter false positives: {fp}/10000");
        assert!(fp < 500, "false positive rate {fp}/10000");
        // A table without a filter may contain anything.
        assert!(MemTable::new(0).may_contain(bloom_hash(b"anything")));
        // The filter's memory is charged: an empty table is not empty in bytes.
        assert!(MemTable::with_bloom(0, 64 << 10, 10).approximate_bytes() >= n * 10 / 8);
    }
}
