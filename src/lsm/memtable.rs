//! The in-memory write buffer: an insert-only skiplist ([`SkipList`], lock-free for readers) with one node
//! per user key, each node holding the key's versions as a chain (newest first), a point index from user key
//! to node, and memory accounting. Nodes, versions and large entries' bytes all live in the table's arena.
//!
//! Entries live *inside* the skiplist nodes and versions: an entry whose internal key and value fit in
//! [`INLINE_CAP`] bytes (every entry of the state backends' fixed-width keys) is stored inline, so a new key
//! is one arena allocation (the node, holding its first version) and each further version of a key one more
//! (a [`Version`] pushed onto the node's chain). An update of a key already in the table finds its node through
//! the point index (open addressing, one probe of usually one cache line) and pushes a version: no skiplist
//! search. A point lookup is an index probe and a walk down the chain; the skiplist is searched only for new
//! keys and when the index does not know a key (its probe window is full). A key the writer's filter rules
//! out (certainly new) skips the index probe and goes straight to the skiplist search. Readers walk the list with plain
//! Acquire loads (nodes are never removed; an epoch guard only protects the index's generations);
//! [`MemCursor`] is a cursor that holds an `Arc` of its table, for iterators that outlive a borrow. The
//! internal-key view (user key ascending, seqno descending) is the same as a skiplist of internal keys: nodes
//! in user-key order, each chain newest first.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

pub(crate) use crossbeam_epoch as epoch;
use parking_lot::RwLock;

use super::arena::{Arena, ArenaBytes};
use super::ikey::{self, ValueKind};
use super::rangedel::RangeTombstone;
use super::skiplist::{Inserted, NodeRef, SkipList};

/// Bytes of `internal key | value` stored inline in a skiplist node (keeps [`MemEntry`] at 40 bytes).
pub(crate) const INLINE_CAP: usize = 37;

/// Internal-key bytes kept inline by [`MemEntry::KeyInline`] (user keys up to 14 bytes).
pub(crate) const KEY_INLINE_CAP: usize = 22;

/// One memtable entry, `internal key | value`.
///
/// The internal key stays inside the skiplist node whenever it is short, so comparisons during a search never
/// leave the node; only the value of a large entry, or the whole of an entry with a long key, is elsewhere in
/// the arena.
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
}

impl MemEntry {
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
        }
    }

    /// The inline first word of a long key's user key, if this is one.
    #[inline]
    fn heap_word(&self) -> Option<u64> {
        match self {
            MemEntry::Heap { word, .. } => Some(*word),
            _ => None,
        }
    }

    /// Orders by user key against `user_key`, whose [`key_word`] is `word` (a long key's first word is
    /// compared before its heap buffer is read).
    #[inline(always)]
    fn cmp_user_key_to(&self, user_key: &[u8], word: u64) -> Ordering {
        if let Some(w) = self.heap_word() {
            if w != word {
                return w.cmp(&word);
            }
        }
        compare_user_keys(ikey::user_key(self.ikey()), user_key)
    }

    /// The trailer `(seqno << 8) | kind` (0 for a malformed key, never stored).
    #[inline]
    fn trailer(&self) -> u64 {
        let k = self.ikey();
        k.get(k.len().saturating_sub(ikey::TRAILER_LEN)..)
            .and_then(|t| <[u8; 8]>::try_from(t).ok())
            .map_or(0, u64::from_be_bytes)
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

/// One user key's node in the skiplist: the key's versions in this table, newest first.
///
/// The version that created the node (the oldest one in this table) lives in the node itself (`first`), so
/// a new key costs one allocation as before; each later version is one [`Version`] in the arena, pushed at
/// `head`.
/// The chain is `head -> ... -> (the oldest pushed version, whose next is null) -> first`, in internal-key
/// order (seqno descending) because versions are only ever pushed newer than every version already there
/// ([`MemTable::add`] checks it). Published versions are never changed, and none is freed before the node.
pub(crate) struct Chain {
    /// The newest pushed version; null while `first` is the only one.
    head: AtomicPtr<Version>,
    /// The oldest version, whose user key orders the node.
    first: MemEntry,
}

/// A version pushed onto a [`Chain`]: allocated in the table's arena (never dropped: its entry's bytes are
/// inline or in the same arena), immutable once published.
struct Version {
    /// The next older pushed version; null: the chain's `first`. Written before publication, never after.
    next: AtomicPtr<Version>,
    entry: MemEntry,
}

/// A position in a [`Chain`]: its node's own version or a pushed one.
#[derive(Clone, Copy)]
enum Pos<'a> {
    First,
    Pushed(&'a Version),
}

impl<'a> Pos<'a> {
    /// The next older version of the same chain.
    #[inline]
    fn older(self) -> Option<Pos<'a>> {
        match self {
            Pos::First => None,
            Pos::Pushed(v) => Some(v.older().map_or(Pos::First, Pos::Pushed)),
        }
    }
}

impl Version {
    /// The next older pushed version (None: the chain's `first` comes next).
    #[inline]
    fn older(&self) -> Option<&Version> {
        let p = self.next.load(AtomicOrdering::Acquire);
        // SAFETY: a non-null `next` was set by `MemTable::push_checked` to a version of the same chain (placed
        // in the table's arena, fully written before the Release store that published it, which
        // happens-before the Acquire load that led here). Versions are never changed, and their memory is
        // freed only with the arena, which the skiplist holding the chain owns, so the older version lives at
        // least as long as `self`, which bounds the borrow.
        unsafe { p.as_ref() }
    }
}

impl Chain {
    /// A node for a new key, holding its first version.
    #[inline]
    fn new(first: MemEntry) -> Self {
        Chain {
            head: AtomicPtr::new(std::ptr::null_mut()),
            first,
        }
    }

    /// Orders this node against `user_key` (whose [`key_word`] is `word`).
    #[inline(always)]
    fn cmp_to(&self, user_key: &[u8], word: u64) -> Ordering {
        self.first.cmp_user_key_to(user_key, word)
    }

    /// The user key.
    #[inline]
    fn user_key(&self) -> &[u8] {
        ikey::user_key(self.first.ikey())
    }

    /// The newest version.
    #[inline]
    fn newest(&self) -> Pos<'_> {
        let p = self.head.load(AtomicOrdering::Acquire);
        // SAFETY: a non-null `head` was stored by `MemTable::push_checked` (an arena allocation) after the
        // version was fully written (Release; this load is Acquire). Pushed versions are never changed and are
        // freed only with the arena of the skiplist that holds `self`, so the version lives at least as long
        // as this borrow of `self`.
        match unsafe { p.as_ref() } {
            Some(v) => Pos::Pushed(v),
            None => Pos::First,
        }
    }

    /// The entry at `pos` (a position in this chain).
    #[inline]
    fn entry<'a>(&'a self, pos: Pos<'a>) -> &'a MemEntry {
        match pos {
            Pos::First => &self.first,
            Pos::Pushed(v) => &v.entry,
        }
    }

    /// The first position whose internal key is `>= (this user key, trailer)`: skips the versions with a
    /// larger trailer (newer). None: every version is newer.
    #[inline]
    fn seek(&self, trailer: u64) -> Option<Pos<'_>> {
        let mut pos = Some(self.newest());
        while let Some(p) = pos {
            if self.entry(p).trailer() <= trailer {
                break;
            }
            pos = p.older();
        }
        pos
    }
}

/// The bytes an entry with an internal key of `klen` bytes and a value of `vlen` bytes copies into the arena,
/// as [`MemEntry::new_in`] lays it out (0 when it is all inline). The arena's chunks are 1/64 of the memtable
/// (at most 1 MiB), so their unused tails add at most a few percent.
#[inline]
fn entry_arena(klen: usize, vlen: usize) -> usize {
    if klen + vlen <= INLINE_CAP {
        0
    } else if klen <= KEY_INLINE_CAP {
        vlen
    } else {
        klen + vlen
    }
}

/// The memory a new key's node takes, as allocated: the node (`node_bytes`, its chain and its next pointers)
/// and the entry's bytes that did not fit in it.
#[inline]
fn charge_node(node_bytes: usize, klen: usize, vlen: usize) -> usize {
    node_bytes + entry_arena(klen, vlen)
}

/// The memory a pushed version takes in the arena.
#[inline]
fn charge_version(klen: usize, vlen: usize) -> usize {
    std::mem::size_of::<Version>() + entry_arena(klen, vlen)
}

/// The arena chunk size of a memtable of `capacity_bytes`: 1/64 of it, from 4 KiB to 1 MiB (the unused tail
/// of the last chunk is at most a few percent of a table).
fn arena_chunk_size(capacity_bytes: usize) -> usize {
    (capacity_bytes / 64).clamp(4 << 10, 1 << 20)
}

/// The hash a memtable's point index is probed with (computed once per lookup, shared by all memtables).
#[inline]
pub(crate) fn key_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Slots a table's point index starts with at most, unless its size hint asks for more: 32 KiB.
pub(crate) const MIN_INDEX_SLOTS: usize = 1 << 12;

/// Memtable bytes per slot of a fresh index (a small table's index starts at 1/32 of its capacity).
const START_BYTES_PER_SLOT: usize = 256;

/// The index doubles when more than `GROW_NUM / GROW_DEN` of its slots are taken (linear probing stays
/// short: at 0.7 a lookup of a present key looks at ≈ 2 slots, usually one cache line; 8 bytes a slot make
/// 11–23 bytes of index per key).
const GROW_NUM: usize = 7;
const GROW_DEN: usize = 10;

/// Slots a probe looks at before giving up ("don't know": the caller searches the skiplist).
const PROBE_WINDOW: usize = 32;

/// Bits of a slot holding the node's address (user-space addresses of x86-64 and AArch64 Linux fit).
const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

/// The address part of a slot whose node's address does not fit in [`ADDR_BITS`]: "a key with this tag is
/// only in the skiplist" (never a node's address: nodes are 8-aligned).
const POISON: u64 = 1;

/// The tag a slot keeps of a key's [`key_hash`] `h`: its low bits.
#[inline]
fn tag(h: u64) -> u64 {
    h & (u64::MAX >> ADDR_BITS)
}

/// The writer's filter of the user keys that have a node in this table (a blocked Bloom filter, 3 bits of
/// one 64-bit word per key, about 8 bits per key at a full table): "absent" lets a new key skip the point
/// index's probe — one cache miss — before its skiplist search. Only a hint: a wrong "absent" would only make
/// the insert search the skiplist, which finds an existing node anyway. Writer only (Relaxed loads and
/// stores, no read-modify-write).
struct KeyFilter {
    words: Box<[AtomicU64]>,
}

impl KeyFilter {
    /// A filter of `bytes` bytes (rounded up to a power of two, at least one word).
    fn new(bytes: usize) -> Self {
        let n = (bytes / 8).max(1).next_power_of_two();
        KeyFilter {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The word and the mask of the bits that key hash `h` sets: hash bits 20 and up pick the word (below the
    /// high bits the index's home slot uses, for any table under 2^44 filter words and slots together), its
    /// low 18 bits the three bits.
    #[inline(always)]
    fn bits(&self, h: u64) -> (Option<&AtomicU64>, u64) {
        let w = ((h >> 20) as usize) & (self.words.len() - 1);
        let mask = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63)) | (1u64 << ((h >> 12) & 63));
        (self.words.get(w), mask)
    }

    /// Whether a key of hash `h` may have a node (false: it certainly has none).
    #[inline(always)]
    fn may_contain(&self, h: u64) -> bool {
        match self.bits(h) {
            (Some(w), mask) => w.load(AtomicOrdering::Relaxed) & mask == mask,
            (None, _) => true,
        }
    }

    /// Records a key of hash `h` (writer only).
    #[inline(always)]
    fn insert(&self, h: u64) {
        if let (Some(w), mask) = self.bits(h) {
            w.store(
                w.load(AtomicOrdering::Relaxed) | mask,
                AtomicOrdering::Relaxed,
            );
        }
    }

    /// Bytes allocated.
    fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// What a probe of the point index found.
enum Probe<'a> {
    /// The key's node.
    Found(&'a Chain),
    /// Not found in the window. `sure`: the key is not in the table (the probe reached an empty slot, where
    /// the key's insert would have gone). `free`: that empty slot.
    Missing { free: Option<usize>, sure: bool },
}

/// One generation of a memtable's point index: open addressing with linear probing. A slot is 0 (empty) or
/// `tag << 48 | address` of a node of the table's skiplist (`tag`: the low 16 bits of [`key_hash`]), or
/// `tag << 48 | POISON` for a node whose address does not fit 48 bits (probes of that tag answer "don't
/// know"). Written only by the table's writer, each slot once (0 -> value, Release); read with Acquire.
struct IndexTable {
    slots: Box<[AtomicU64]>,
}

impl IndexTable {
    /// The home slot of key hash `h`: its high bits by fastrange (the tag is its low bits).
    #[inline(always)]
    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.slots.len() as u128) >> 64) as usize
    }

    /// Asks the CPU for the cache line of the home slot of key hash `h` (a hint, so that a probe issued after
    /// a skiplist search finds it in cache).
    #[inline(always)]
    fn prefetch_home(&self, h: u64) {
        let i = self.home(h);
        #[cfg(target_arch = "x86_64")]
        if let Some(slot) = self.slots.get(i) {
            // SAFETY: a prefetch never faults and writes nothing; `slot` is a valid reference anyway.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    std::ptr::from_ref(slot).cast(),
                );
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    fn new(n: usize) -> Self {
        #[cfg(test)]
        LIVE_INDEX_TABLES.with(|c| c.set(c.get() + 1));
        IndexTable {
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Looks `user_key` (hash `h`) up.
    #[inline]
    fn probe<'a>(&'a self, user_key: &[u8], h: u64) -> Probe<'a> {
        let n = self.slots.len();
        let tag = tag(h);
        // fastrange: the high bits of `h` pick the home slot (the tag is its low bits).
        let mut i = self.home(h);
        let mut sure = true;
        for _ in 0..PROBE_WINDOW.min(n) {
            let Some(slot) = self.slots.get(i) else { break };
            let s = slot.load(AtomicOrdering::Acquire);
            if s == 0 {
                return Probe::Missing {
                    free: Some(i),
                    sure,
                };
            }
            if s >> ADDR_BITS == tag {
                let addr = s & ADDR_MASK;
                if addr == POISON {
                    sure = false;
                } else {
                    // SAFETY: a slot's address is only ever that of a `Chain` inside a node of the table's
                    // skiplist (`publish`), stored with Release after the node was inserted, loaded here with
                    // Acquire. Nodes are never removed from the list (it is insert-only) and their memory,
                    // in the table's arena, is freed only with the table. An index generation is reached
                    // only through `MemTable::index`, which ties its borrow ('a) to a borrow of the table, or
                    // while `grow_index` (holding `&self`) builds one; so the node outlives 'a. A `Chain` is
                    // only mutated through atomics.
                    let chain = unsafe { &*(addr as usize as *const Chain) };
                    if chain.user_key() == user_key {
                        return Probe::Found(chain);
                    }
                }
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        Probe::Missing {
            free: None,
            sure: false,
        }
    }

    /// The first empty slot of key hash `h`'s probe window (None: the window is full), for a key known not to
    /// be in this generation (a rebuild places each node once, so no key needs comparing).
    #[inline]
    fn free_slot(&self, h: u64) -> Option<usize> {
        let n = self.slots.len();
        let mut i = self.home(h);
        for _ in 0..PROBE_WINDOW.min(n) {
            if self.slots.get(i)?.load(AtomicOrdering::Relaxed) == 0 {
                return Some(i);
            }
            i += 1;
            if i == n {
                i = 0;
            }
        }
        None
    }

    /// Stores `tag << 48 | addr` in the empty slot `i`.
    #[inline]
    fn publish(&self, i: usize, slot_value: u64) {
        if let Some(slot) = self.slots.get(i) {
            debug_assert_eq!(slot.load(AtomicOrdering::Relaxed), 0);
            slot.store(slot_value, AtomicOrdering::Release);
        }
    }

    /// Bytes allocated.
    fn bytes(&self) -> usize {
        self.slots.len() * 8
    }
}

#[cfg(test)]
thread_local! {
    /// Index generations made and not yet freed on this thread (tests of `MemTable::drop`).
    static LIVE_INDEX_TABLES: std::cell::Cell<isize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Drop for IndexTable {
    fn drop(&mut self) {
        LIVE_INDEX_TABLES.with(|c| c.set(c.get() - 1));
    }
}

/// The slot value recording `chain` with key hash `h`.
#[inline]
fn slot_value(h: u64, chain: &Chain) -> u64 {
    let addr = chain as *const Chain as usize as u64;
    #[cfg(test)]
    let addr = if POISON_EVEN_HASHES.with(|p| p.get()) && h % 2 == 0 {
        // Tests: as if the node's address did not fit a slot (never happens on x86-64/AArch64 Linux).
        u64::MAX
    } else {
        addr
    };
    let addr = if addr & !ADDR_MASK == 0 { addr } else { POISON };
    tag(h) << ADDR_BITS | addr
}

#[cfg(test)]
thread_local! {
    /// Set by tests: nodes of keys with an even hash get poisoned slots, as if their address were too high.
    static POISON_EVEN_HASHES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Asks the CPU for the cache lines holding the start of the node at `addr` (its key, when inline): a hint,
/// it never faults.
#[inline(always)]
fn prefetch_node(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = addr as usize as *const i8;
        // SAFETY: a prefetch never faults and reads or writes nothing architecturally; `p` is only a hint.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p);
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                p.wrapping_add(48),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

impl Drop for MemTable {
    fn drop(&mut self) {
        // `epoch::Atomic` frees nothing when dropped: free the current index generation here (the replaced
        // ones went to the epoch collector in `grow_index`).
        // SAFETY: `&mut self` means no borrow of the table is alive, and every reference into an index
        // generation is tied to such a borrow (`MemTable::index`), so no thread can read this generation
        // any more; the pointer was made from an `Owned` (`with_capacity` or `grow_index`) and is taken out
        // of the table (replaced by null) before it is freed, once.
        unsafe {
            let guard = epoch::unprotected();
            let current = self
                .index
                .swap(epoch::Shared::null(), AtomicOrdering::Relaxed, guard);
            if !current.is_null() {
                drop(current.into_owned());
            }
        }
    }
}

/// A memtable. Entries are never removed; the whole table is dropped after it is flushed.
///
/// One writer at a time calls [`add`](Self::add) (the engine's write lock serialises every write, and the
/// WAL replay is single-threaded), concurrently with any number of readers.
pub(crate) struct MemTable {
    /// One node per user key, by user key (insert-only: nodes live until the table is dropped). Its arena
    /// also holds the pushed versions and the bytes of entries too large for their node.
    list: SkipList<Chain>,
    /// Point index, grown by the writer (doubling, rebuilt from its slots) and swapped in whole: readers keep
    /// using the generation they loaded, which is freed through the epoch collector once none can hold it.
    index: epoch::Atomic<IndexTable>,
    /// Slots taken in the current index generation (writer only).
    index_used: AtomicUsize,
    /// Index growths so far, and the microseconds the writer spent in them.
    index_growths: AtomicU64,
    index_growth_micros: AtomicU64,
    /// Addresses of the nodes no slot of the current index generation points to: their probe window was
    /// full, or their address does not fit a slot (such a node gets a poisoned slot, if its window has
    /// room, which turns probes of its tag into "don't know"). With the slots, every node, so a grow
    /// rebuilds the index from the old generation and this list, never from the skiplist. Writer only (the
    /// lock is never contended); ≈ 0.1 % of the nodes just before a growth (0.7 load).
    index_left_out: parking_lot::Mutex<Vec<usize>>,
    /// The writer's filter of the keys with a node here (lets a new key skip the index probe).
    new_keys: KeyFilter,
    /// Set by tests that fix the index to a size (it then never grows).
    #[cfg(test)]
    index_frozen: std::sync::atomic::AtomicBool,
    bytes: AtomicUsize,
    max_seqno: AtomicU64,
    range_dels: RwLock<Vec<RangeTombstone>>,
    /// Number of range tombstones, read without the lock (most memtables hold none).
    range_del_count: AtomicUsize,
    /// The WAL file that holds this memtable's writes (0 without a WAL).
    pub wal_number: u64,
    /// Set while `add` runs (debug builds): catches a second concurrent writer.
    #[cfg(debug_assertions)]
    writing: std::sync::atomic::AtomicBool,
}

impl MemTable {
    /// An empty memtable logging to WAL `wal_number`, with a point index of [`MIN_INDEX_SLOTS`].
    pub fn new(wal_number: u64) -> Self {
        Self::with_capacity(wal_number, MIN_INDEX_SLOTS * START_BYTES_PER_SLOT, 0)
    }

    /// An empty memtable logging to WAL `wal_number`, for a table of up to `capacity_bytes` (sizes the
    /// arena's chunks and the first index), whose point index starts with `index_slots` slots (a table as
    /// large as the previous one then needs no rebuild), or more for a large table: `capacity_bytes / 256`,
    /// from 8 to [`MIN_INDEX_SLOTS`], rounded up to a power of two. The index's memory is charged to the
    /// table as it grows; the writer's key filter (`capacity_bytes / 64`, rounded up to a power of two) from
    /// the start.
    pub fn with_capacity(wal_number: u64, capacity_bytes: usize, index_slots: usize) -> Self {
        let start = (capacity_bytes / START_BYTES_PER_SLOT).clamp(8, MIN_INDEX_SLOTS);
        let index = IndexTable::new(index_slots.max(start).next_power_of_two());
        let new_keys = KeyFilter::new(capacity_bytes / 64);
        Self {
            list: SkipList::new(Arena::new(arena_chunk_size(capacity_bytes))),
            bytes: AtomicUsize::new(index.bytes() + new_keys.bytes()),
            index: epoch::Atomic::new(index),
            index_used: AtomicUsize::new(0),
            index_growths: AtomicU64::new(0),
            index_growth_micros: AtomicU64::new(0),
            index_left_out: parking_lot::Mutex::new(Vec::new()),
            new_keys,
            #[cfg(test)]
            index_frozen: std::sync::atomic::AtomicBool::new(false),
            max_seqno: AtomicU64::new(0),
            range_dels: RwLock::new(Vec::new()),
            range_del_count: AtomicUsize::new(0),
            wal_number,
            #[cfg(debug_assertions)]
            writing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A table whose index has exactly `slots` slots and never grows (tests of a full probe window).
    #[cfg(test)]
    fn with_fixed_index(slots: usize) -> Self {
        let m = Self::new(0);
        let t = IndexTable::new(slots);
        m.bytes
            .store(t.bytes() + m.new_keys.bytes(), AtomicOrdering::Relaxed);
        let guard = epoch::pin();
        let old = m
            .index
            .swap(epoch::Owned::new(t), AtomicOrdering::AcqRel, &guard);
        // SAFETY: `old` is unreachable from the new table, no reader has seen it yet.
        unsafe { guard.defer_destroy(old) };
        m.index_frozen.store(true, AtomicOrdering::Relaxed);
        m
    }

    /// Whether the index may grow (always, except in tests that fix its size).
    #[inline]
    fn index_may_grow(&self) -> bool {
        #[cfg(test)]
        return !self.index_frozen.load(AtomicOrdering::Relaxed);
        #[cfg(not(test))]
        true
    }

    /// The current index generation.
    #[inline]
    fn index<'g>(&'g self, guard: &'g epoch::Guard) -> Option<&'g IndexTable> {
        // SAFETY: the pointer is either the table's initial generation or one stored by `grow_index`; a
        // generation replaced by `grow_index` is destroyed through `defer_destroy`, only after every guard
        // pinned before the swap (like `guard`) is gone, and the current one is freed by `MemTable::drop`,
        // which cannot run while this borrow of the table lives.
        unsafe { self.index.load(AtomicOrdering::Acquire, guard).as_ref() }
    }

    /// Slots of the current point index (a size hint for the next table).
    pub fn index_slots(&self) -> usize {
        let guard = epoch::pin();
        self.index(&guard).map_or(0, |t| t.slots.len())
    }

    /// Looks `user_key` (hash `h`) up in the point index.
    #[inline]
    fn probe<'g>(&'g self, user_key: &[u8], h: u64, guard: &'g epoch::Guard) -> Probe<'g> {
        match self.index(guard) {
            Some(t) => t.probe(user_key, h),
            None => Probe::Missing {
                free: None,
                sure: false,
            },
        }
    }

    /// Records a new node `chain` (hash `h`) in the free slot `free` a probe of the current generation
    /// returned (None: the key's probe window is full, and the key stays out of the index: a probe of it
    /// crosses the same full window, answers "don't know", and its reader searches the skiplist), adds it to
    /// the left-out list if no slot points to it (full window, or a poisoned slot), and grows the index when
    /// it is full enough. Writer only.
    fn publish(&self, free: Option<usize>, h: u64, chain: &Chain, guard: &epoch::Guard) {
        let Some(t) = self.index(guard) else { return };
        let value = slot_value(h, chain);
        if free.is_none() || value & ADDR_MASK == POISON {
            self.index_left_out
                .lock()
                .push(chain as *const Chain as usize);
        }
        let Some(i) = free else { return };
        t.publish(i, value);
        let used = self.index_used.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        if used * GROW_DEN > t.slots.len() * GROW_NUM && self.index_may_grow() {
            self.grow_index(t.slots.len() * 2, guard);
        }
    }

    /// Replaces the index with one of `slots` slots, rebuilt from the current generation's slots and the
    /// nodes it left out: a sequential scan, each node's key prefetched ahead (4–5x faster than a walk of
    /// the skiplist, whose nodes are in key order but scattered over the arena: 23–31 ms instead of
    /// 123–127 at 734k nodes, allocation included; `design/lsm-engine.md`, "Growth cost"). Writer only (no
    /// node is added while it runs); readers see the old or the new generation, each complete for every
    /// key it holds.
    #[cold]
    fn grow_index(&self, slots: usize, guard: &epoch::Guard) {
        let Some(old) = self.index(guard) else { return };
        let started = std::time::Instant::now();
        let new = IndexTable::new(slots);
        let mut left_out = self.index_left_out.lock();
        let (used, still_left_out) = Self::rebuild_index(old, &left_out, &new);
        *left_out = still_left_out;
        drop(left_out);
        let added = new.bytes().saturating_sub(old.bytes());
        self.index_used.store(used, AtomicOrdering::Relaxed);
        let prev = self
            .index
            .swap(epoch::Owned::new(new), AtomicOrdering::AcqRel, guard);
        // SAFETY: `prev` was the current generation and is no longer reachable from `self.index`; readers
        // that loaded it hold guards pinned before this point, and `defer_destroy` waits for them.
        unsafe { guard.defer_destroy(prev) };
        // Hand the old generation to the global queue now: a thread-local bag is only flushed when it holds 64
        // deferred items, and until then the generation (megabytes) would stay allocated.
        guard.flush();
        self.bytes.fetch_add(added, AtomicOrdering::Relaxed);
        self.index_growths.fetch_add(1, AtomicOrdering::Relaxed);
        self.index_growth_micros.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            AtomicOrdering::Relaxed,
        );
    }

    /// How many times the point index grew, and the microseconds the writer spent growing it.
    pub fn index_growth_stats(&self) -> (u64, u64) {
        (
            self.index_growths.load(AtomicOrdering::Relaxed),
            self.index_growth_micros.load(AtomicOrdering::Relaxed),
        )
    }

    /// Fills the empty generation `new` with every node of the table: those `old` points to and those it
    /// left out (`left_out`). Returns the slots taken and the nodes `new` leaves out.
    fn rebuild_index(
        old: &IndexTable,
        left_out: &[usize],
        new: &IndexTable,
    ) -> (usize, Vec<usize>) {
        /// Slots ahead of the scan whose nodes are prefetched (≈ 11 nodes at the 0.7 load of a grow).
        const AHEAD: usize = 16;
        let mut used = 0;
        let mut still_left_out = Vec::new();
        let mut place = |addr: usize| {
            // SAFETY: `addr` is that of a `Chain` inside a node of this table's skiplist (a slot's address,
            // as in `IndexTable::probe`, or one `publish` recorded as left out), and nodes live as long as
            // the table, which the caller (`grow_index`, the writer) borrows.
            let chain = unsafe { &*(addr as *const Chain) };
            let h = key_hash(chain.user_key());
            let value = slot_value(h, chain);
            match new.free_slot(h) {
                Some(i) => {
                    new.publish(i, value);
                    used += 1;
                    if value & ADDR_MASK == POISON {
                        still_left_out.push(addr);
                    }
                }
                None => still_left_out.push(addr),
            }
        };
        for i in 0..old.slots.len() {
            if let Some(ahead) = old.slots.get(i + AHEAD) {
                let addr = ahead.load(AtomicOrdering::Relaxed) & ADDR_MASK;
                if addr > POISON {
                    prefetch_node(addr);
                }
            }
            let s = old
                .slots
                .get(i)
                .map_or(0, |s| s.load(AtomicOrdering::Relaxed));
            let addr = s & ADDR_MASK;
            // Empty, or the marker of a node in `left_out`.
            if s != 0 && addr != POISON {
                place(addr as usize);
            }
        }
        for &addr in left_out {
            place(addr);
        }
        (used, still_left_out)
    }

    /// Inserts one entry. Callers are serialised (one writer at a time), and for each user key the seqnos
    /// increase from one call to the next (the engine assigns seqnos in write order under its write lock).
    pub fn add(&self, seqno: u64, kind: ValueKind, key: &[u8], value: &[u8]) {
        #[cfg(debug_assertions)]
        assert!(
            !self.writing.swap(true, AtomicOrdering::Acquire),
            "concurrent MemTable::add"
        );
        if kind == ValueKind::RangeDelete {
            let mut t = self.range_dels.write();
            t.push(RangeTombstone {
                start: key.to_vec(),
                end: value.to_vec(),
                seqno,
            });
            self.range_del_count.store(t.len(), AtomicOrdering::Release);
        }
        // The engine's seqnos only grow: a version newer than the whole table is newer than its chain.
        let newest_in_table = seqno > self.max_seqno.fetch_max(seqno, AtomicOrdering::Relaxed);
        let (klen, vlen) = (key.len() + ikey::TRAILER_LEN, value.len());
        let trailer = ikey::trailer(seqno, kind);
        let h = key_hash(key);
        let guard = epoch::pin();
        let charged = if !self.new_keys.may_contain(h) {
            // Certainly a new key: search the skiplist at once, with the index's slot line on its way for
            // the publication afterwards.
            if let Some(t) = self.index(&guard) {
                t.prefetch_home(h);
            }
            self.insert_node(key, h, trailer, value, newest_in_table, &guard, None)
        } else {
            match self.probe(key, h, &guard) {
                Probe::Found(chain) => {
                    self.push_checked(chain, key, trailer, value, newest_in_table);
                    charge_version(klen, vlen)
                }
                // New, or in the skiplist but not in the index (its probe window is full): one search
                // finds it or inserts it.
                Probe::Missing { free, .. } => {
                    self.insert_node(key, h, trailer, value, newest_in_table, &guard, Some(free))
                }
            }
        };
        self.bytes.fetch_add(charged, AtomicOrdering::Relaxed);
        #[cfg(debug_assertions)]
        self.writing.store(false, AtomicOrdering::Release);
    }

    /// Finds the node of `key` (hash `h`) in the skiplist and pushes the version onto it,
    /// or inserts a node holding it, records it in the key filter and publishes it in the index (in the free
    /// slot `free` a probe found, or, when no probe was made, in the one a probe finds now; not at all when
    /// the key's probe window is full). Returns the bytes to charge.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn insert_node(
        &self,
        key: &[u8],
        h: u64,
        trailer: u64,
        value: &[u8],
        newest_in_table: bool,
        guard: &epoch::Guard,
        free: Option<Option<usize>>,
    ) -> usize {
        let (klen, vlen) = (key.len() + ikey::TRAILER_LEN, value.len());
        let word = key_word(key);
        match self.list.find_or_insert(
            |c| c.cmp_to(key, word),
            || Chain::new(MemEntry::new_in(key, trailer, value, self.list.arena())),
        ) {
            Inserted::Found(chain) => {
                self.push_checked(chain, key, trailer, value, newest_in_table);
                charge_version(klen, vlen)
            }
            Inserted::New(chain, node_bytes) => {
                self.new_keys.insert(h);
                let free = match free {
                    Some(free) => free,
                    None => match self.probe(key, h, guard) {
                        Probe::Missing { free, .. } => free,
                        // Never: the node was just created; a key is published once.
                        Probe::Found(_) => {
                            debug_assert!(false, "a new node was already in the index");
                            None
                        }
                    },
                };
                self.publish(free, h, chain, guard);
                charge_node(node_bytes, klen, vlen)
            }
        }
    }

    /// Pushes `key | trailer | value` onto `chain` (the node of `key`), checking (unless `newest_in_table`
    /// already proves it) that it is newer than the chain's newest version: a chain out of order would break
    /// the table's internal-key order.
    #[inline]
    fn push_checked(
        &self,
        chain: &Chain,
        key: &[u8],
        trailer: u64,
        value: &[u8],
        newest_in_table: bool,
    ) {
        if !newest_in_table {
            let newest = chain.entry(chain.newest()).trailer();
            assert!(
                trailer > newest,
                "MemTable::add: a version of a key must be newer than its versions already in the table"
            );
        }
        let arena = self.list.arena();
        let entry = MemEntry::new_in(key, trailer, value, arena);
        let v = arena.alloc(Version {
            next: AtomicPtr::new(chain.head.load(AtomicOrdering::Relaxed)),
            entry,
        });
        chain.head.store(v.as_ptr(), AtomicOrdering::Release);
    }

    /// Approximate memory use in bytes: what the nodes, versions, their buffers, the index and the writer's
    /// key filter take from the allocator.
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

    /// The node of `user_key` (hash `h`, [`key_hash`]): the index, else (when it does not know) the skiplist.
    #[inline]
    fn chain<'g>(&'g self, user_key: &[u8], h: u64, guard: &'g epoch::Guard) -> Option<&'g Chain> {
        match self.probe(user_key, h, guard) {
            Probe::Found(chain) => Some(chain),
            Probe::Missing { sure: true, .. } => None,
            Probe::Missing { sure: false, .. } => {
                let word = key_word(user_key);
                self.list.find(|c| c.cmp_to(user_key, word))
            }
        }
    }

    /// The versions of `user_key` with seqno `<= snapshot`, newest first, borrowed for the guard's lifetime
    /// (entries are never removed, so the bytes stay valid while the table and the guard live).
    #[cfg(test)]
    pub fn versions<'g>(
        &'g self,
        user_key: &[u8],
        snapshot: u64,
        guard: &'g epoch::Guard,
    ) -> Versions<'g> {
        self.versions_hashed(user_key, key_hash(user_key), snapshot, guard)
    }

    /// The versions of `user_key` (whose [`key_hash`] is `h`) with seqno `<= snapshot`, newest first,
    /// borrowed for the guard's lifetime (nothing is removed or changed in place, so the bytes stay valid while
    /// the table and the guard live).
    #[inline]
    pub fn versions_hashed<'g>(
        &'g self,
        user_key: &[u8],
        h: u64,
        snapshot: u64,
        guard: &'g epoch::Guard,
    ) -> Versions<'g> {
        let chain = self.chain(user_key, h, guard);
        Versions {
            chain,
            pos: chain.map(Chain::newest),
            snapshot,
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
        let mut cur = self.list.first();
        while let Some(e) = cur {
            let chain = e.get();
            let mut pos = Some(chain.newest());
            while let Some(p) = pos {
                let entry = chain.entry(p);
                f(entry.ikey(), entry.value())?;
                pos = p.older();
            }
            cur = e.next();
        }
        Ok(())
    }
}

/// Iterator returned by [`MemTable::versions`]: `(seqno, kind, value)`, newest first.
pub(crate) struct Versions<'g> {
    chain: Option<&'g Chain>,
    /// The next version to look at.
    pos: Option<Pos<'g>>,
    snapshot: u64,
}

impl<'g> Iterator for Versions<'g> {
    type Item = (u64, ValueKind, &'g [u8]);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let chain = self.chain?;
        loop {
            let pos = self.pos?;
            self.pos = pos.older();
            let entry: &'g MemEntry = chain.entry(pos);
            let Some(p) = ikey::parse(entry.ikey()) else {
                continue;
            };
            // Newer than the read: skipped (the chain is newest first).
            if p.seqno > self.snapshot {
                continue;
            }
            return Some((p.seqno, p.kind, entry.value()));
        }
    }
}

/// A forward cursor over a memtable that owns a share of it and can outlive any borrow: it holds its current
/// node and a position in that node's chain (nothing is removed or changed in place, so a step is one
/// pointer hop), and copies nothing out.
pub(crate) struct MemCursor {
    /// The current node and version, in `mem`'s list: valid while `mem` is held (see `detach`).
    cur: Option<(NodeRef<'static, Chain>, Pos<'static>)>,
    mem: Arc<MemTable>,
}

// SAFETY: the cursor only reads the node and versions it points to (through shared references, like the
// `Arc<MemTable>` it holds, which is `Send + Sync`), and they live as long as that `Arc`.
unsafe impl Send for MemCursor {}
// SAFETY: as above.
unsafe impl Sync for MemCursor {}

impl MemCursor {
    /// An unpositioned cursor over `mem`.
    pub fn new(mem: Arc<MemTable>) -> Self {
        Self { cur: None, mem }
    }

    /// Positions at the first version at or after node `e` (of `self.mem.list`) whose internal key is
    /// `>= (user_key, trailer)` of `target` (None: the newest version of `e`): within `e` if it is the node of
    /// `user_key`, else (or if every version there is newer) the newest version of the next node.
    fn settle(&mut self, mut e: Option<NodeRef<'static, Chain>>, target: Option<(&[u8], u64)>) {
        while let Some(node) = e {
            let chain = node.get();
            let pos = match target {
                Some((uk, t)) if chain.user_key() == uk => chain.seek(t),
                _ => Some(chain.newest()),
            };
            if let Some(pos) = pos {
                self.cur = Some((node, pos));
                return;
            }
            e = node.next();
        }
        self.cur = None;
    }

    /// Positions at the first entry.
    pub fn seek_to_first(&mut self) {
        let first = detach(self.mem.list.first());
        self.settle(first, None);
    }

    /// Positions at the first entry whose internal key is `>= target`.
    pub fn seek(&mut self, target: &[u8]) {
        let split = target.len().saturating_sub(ikey::TRAILER_LEN);
        let (uk, t) = target.split_at(split);
        // Not a whole internal key (never produced by the engine): the newest version of `target` on.
        let (uk, t) = match <[u8; 8]>::try_from(t) {
            Ok(t) => (uk, u64::from_be_bytes(t)),
            Err(_) => (target, u64::MAX),
        };
        let word = key_word(uk);
        let start = detach(self.mem.list.lower_bound(|c| c.cmp_to(uk, word)));
        self.settle(start, Some((uk, t)));
    }

    /// Advances to the next entry.
    pub fn next(&mut self) {
        let Some((node, pos)) = &mut self.cur else {
            return;
        };
        if let Some(older) = pos.older() {
            *pos = older;
            return;
        }
        let next = node.next();
        self.settle(next, None);
    }

    /// The current entry.
    #[inline]
    pub fn entry(&self) -> Option<&MemEntry> {
        self.cur.as_ref().map(|(node, pos)| node.get().entry(*pos))
    }
}

/// Extends the lifetime of a node of a [`MemCursor`]'s own table to `'static`, so the cursor can hold it
/// next to the `Arc` that keeps the table alive.
#[inline]
fn detach(e: Option<NodeRef<'_, Chain>>) -> Option<NodeRef<'static, Chain>> {
    // SAFETY: only called on nodes of `MemCursor::mem.list`, which lives inside the `Arc` allocation the
    // cursor holds (never replaced) for as long as the cursor exists; nodes are never removed, and their
    // memory (the table's arena) is freed only with the table. The `'static` lifetime never escapes:
    // `MemCursor::entry` hands out borrows of the cursor.
    e.map(|n| unsafe { n.extend() })
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
    fn entry_order_against_a_user_key_is_bytewise() {
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
        // Inline, key-inline (large value) and heap entries against every user key.
        let arena = Arena::new(4096);
        for x in &keys {
            for y in &keys {
                for vx in [0, 100] {
                    let a =
                        MemEntry::new_in(x, ikey::trailer(1, ValueKind::Put), &vec![1; vx], &arena);
                    assert_eq!(a.cmp_user_key_to(y, key_word(y)), x.cmp(y), "{x:?} {y:?}");
                }
            }
        }
    }

    #[test]
    fn entry_stays_small_and_long_entries_go_to_the_arena() {
        assert_eq!(std::mem::size_of::<MemEntry>(), 40);
        // A node's key and a pushed version: the entry plus one pointer (the accounting assumes both).
        assert_eq!(std::mem::size_of::<Chain>(), 48);
        assert_eq!(std::mem::size_of::<Version>(), 48);
        let arena = Arena::new(4096);
        let short = MemEntry::new_in(b"key", ikey::trailer(7, ValueKind::Put), b"value", &arena);
        assert!(matches!(short, MemEntry::Inline { .. }));
        let long_key = vec![b'k'; 60];
        let long = MemEntry::new_in(&long_key, ikey::trailer(7, ValueKind::Put), b"v", &arena);
        assert!(matches!(long, MemEntry::Heap { .. }));
        assert_eq!(ikey::user_key(long.ikey()), &long_key[..]);
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
        // Without an index (every lookup searches the skiplist) and with one.
        for m in [
            MemTable::new(0),
            MemTable::with_capacity(0, 1 << 20, 1 << 14),
        ] {
            lookups_and_cursor_mix_inline_and_heap_entries_in(Arc::new(m));
        }
    }

    fn lookups_and_cursor_mix_inline_and_heap_entries_in(m: Arc<MemTable>) {
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

    /// Every entry of `m` through a cursor, as `(user key, seqno)`, checking strict internal-key order.
    fn cursor_entries(m: &Arc<MemTable>) -> Vec<(Vec<u8>, u64)> {
        let mut c = MemCursor::new(Arc::clone(m));
        c.seek_to_first();
        let mut out = Vec::new();
        let mut prev: Option<Vec<u8>> = None;
        while let Some(e) = c.entry() {
            if let Some(p) = &prev {
                assert_eq!(
                    ikey::compare(p, e.ikey()),
                    Ordering::Less,
                    "{p:?} {:?}",
                    e.ikey()
                );
            }
            prev = Some(e.ikey().to_vec());
            let p = ikey::parse(e.ikey()).expect("internal key");
            out.push((p.user_key.to_vec(), p.seqno));
            c.next();
        }
        out
    }

    #[test]
    fn versions_of_one_key_come_newest_first_in_cursor_order() {
        let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
        m.add(1, ValueKind::Put, b"b", b"b1");
        m.add(2, ValueKind::Put, b"a", b"a2");
        m.add(3, ValueKind::Merge, b"b", b"b3");
        m.add(4, ValueKind::Put, b"c", b"c4");
        m.add(5, ValueKind::Delete, b"b", b"");
        m.add(6, ValueKind::Put, b"b", b"b6");
        let want: Vec<(Vec<u8>, u64)> = [
            (&b"a"[..], 2),
            (b"b", 6),
            (b"b", 5),
            (b"b", 3),
            (b"b", 1),
            (b"c", 4),
        ]
        .iter()
        .map(|(k, s)| (k.to_vec(), *s))
        .collect();
        assert_eq!(cursor_entries(&m), want);
        // The flush walk sees the same order.
        let mut flushed = Vec::new();
        m.try_for_each(|k, v| {
            let p = ikey::parse(k).expect("internal key");
            flushed.push((p.user_key.to_vec(), p.seqno, v.to_vec()));
            Ok::<(), ()>(())
        })
        .unwrap();
        let keys: Vec<(Vec<u8>, u64)> = flushed.iter().map(|(k, s, _)| (k.clone(), *s)).collect();
        assert_eq!(keys, want);
        assert_eq!(flushed[1].2, b"b6");
        assert_eq!(flushed[4].2, b"b1");
        // A seek into the middle of a chain lands on the first version at or below the target's seqno.
        let mut c = MemCursor::new(Arc::clone(&m));
        c.seek(&lookup_key(b"b", 4));
        let at = c
            .entry()
            .and_then(|e| ikey::parse(e.ikey()).map(|p| p.seqno));
        assert_eq!(at, Some(3));
        c.next();
        c.next();
        let at = c
            .entry()
            .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
        assert_eq!(at, Some((b"c".to_vec(), 4)));
    }

    #[test]
    fn read_at_older_snapshot_skips_newer_chain_versions() {
        let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
        for s in [1u64, 3, 5] {
            m.add(s, ValueKind::Put, b"k", format!("v{s}").as_bytes());
            m.add(s + 1, ValueKind::Put, b"other", b"x");
        }
        let read = |snapshot: u64| {
            let mut seen = Vec::new();
            m.for_each_version(b"k", snapshot, |s, _, v| {
                seen.push((s, v.to_vec()));
                true
            });
            seen
        };
        assert_eq!(
            read(u64::MAX),
            vec![
                (5, b"v5".to_vec()),
                (3, b"v3".to_vec()),
                (1, b"v1".to_vec())
            ]
        );
        assert_eq!(read(4), vec![(3, b"v3".to_vec()), (1, b"v1".to_vec())]);
        assert_eq!(read(3), vec![(3, b"v3".to_vec()), (1, b"v1".to_vec())]);
        assert_eq!(read(2), vec![(1, b"v1".to_vec())]);
        assert!(read(0).is_empty());
        // A cursor seek at a snapshot older than every version moves on to the next key.
        let mut c = MemCursor::new(Arc::clone(&m));
        c.seek(&lookup_key(b"k", 0));
        let at = c
            .entry()
            .and_then(|e| ikey::parse(e.ikey()).map(|p| (p.user_key.to_vec(), p.seqno)));
        assert_eq!(at, Some((b"other".to_vec(), 6)));
    }

    #[test]
    fn key_whose_probe_window_is_full_is_still_found_via_the_skiplist() {
        // 8 slots (the whole table is one probe window) for 40 keys: 32 keys are only in the skiplist.
        let m = Arc::new(MemTable::with_fixed_index(8));
        assert_eq!(m.index_slots(), 8);
        let key = |i: u64| format!("key{i:03}").into_bytes();
        let mut seq = 0;
        for round in 0..2 {
            for i in 0..40 {
                seq += 1;
                m.add(seq, ValueKind::Put, &key(i), format!("{round}").as_bytes());
            }
        }
        let mut unindexed = 0;
        for i in 0..40 {
            let k = key(i);
            let guard = epoch::pin();
            match m.probe(&k, key_hash(&k), &guard) {
                Probe::Found(c) => assert_eq!(c.user_key(), &k[..]),
                Probe::Missing { sure, free } => {
                    assert!(!sure && free.is_none(), "a present key ruled out");
                    unindexed += 1;
                }
            }
            let mut seen = Vec::new();
            m.for_each_version(&k, u64::MAX, |s, _, v| {
                seen.push((s, v.to_vec()));
                true
            });
            assert_eq!(
                seen,
                vec![(41 + i, b"1".to_vec()), (1 + i, b"0".to_vec())],
                "{i}"
            );
        }
        assert_eq!(unindexed, 32);
        // Absent keys are absent, with the index full ("don't know") as with it not.
        for i in 40..60 {
            m.for_each_version(&key(i), u64::MAX, |_, _, _| panic!("absent key {i} found"));
        }
        assert_eq!(cursor_entries(&m).len(), 80);
    }

    #[test]
    fn index_grows_with_the_keys_and_rules_out_absent_ones() {
        // A table of distinct small keys from the smallest index: it doubles several times, each rebuild
        // keeping the keys findable, and stays between 0.35 and 0.7 full.
        let capacity = 4 << 20;
        let m = MemTable::new(0);
        assert_eq!(m.index_slots(), MIN_INDEX_SLOTS);
        let mut n = 0u64;
        while m.approximate_bytes() < capacity {
            n += 1;
            m.add(n, ValueKind::Put, &n.to_be_bytes(), b"v");
        }
        assert!(
            m.index_slots() >= 8 * MIN_INDEX_SLOTS,
            "{}",
            m.index_slots()
        );
        assert!(!m.index_frozen.load(AtomicOrdering::Relaxed));
        let load = n as f64 / m.index_slots() as f64;
        let guard = epoch::pin();
        let mut indexed = 0;
        for i in 1..=n {
            if matches!(
                m.probe(&i.to_be_bytes(), key_hash(&i.to_be_bytes()), &guard),
                Probe::Found(_)
            ) {
                indexed += 1;
            }
        }
        let absent = 10_000u64;
        let ruled_out = (n + 1..=n + absent)
            .filter(|i| {
                matches!(
                    m.probe(&i.to_be_bytes(), key_hash(&i.to_be_bytes()), &guard),
                    Probe::Missing { sure: true, .. }
                )
            })
            .count();
        println!("index load {load:.2}: {indexed}/{n} keys indexed, {ruled_out}/{absent} absent keys ruled out");
        assert!((0.35..=0.7).contains(&load), "load {load}");
        assert!(indexed as f64 >= 0.99 * n as f64, "{indexed}/{n}");
        assert!(
            ruled_out as f64 >= 0.99 * absent as f64,
            "{ruled_out}/{absent}"
        );
    }

    #[test]
    fn concurrent_reader_sees_a_sorted_consistent_view_while_the_writer_pushes() {
        let m = Arc::new(MemTable::with_capacity(0, 1 << 20, 1 << 14));
        let keys: Vec<Vec<u8>> = (0..200u32)
            .map(|i| format!("k{:05}", i * 7 % 200).into_bytes())
            .collect();
        // Every value is its own seqno, so a reader can check each version it sees.
        for (i, k) in keys.iter().enumerate() {
            let s = i as u64 + 1;
            m.add(s, ValueKind::Put, k, &s.to_be_bytes());
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (m, done, keys) = (Arc::clone(&m), Arc::clone(&done), keys.clone());
                std::thread::spawn(move || {
                    let mut passes = 0;
                    while !done.load(AtomicOrdering::Acquire) || passes == 0 {
                        let mut c = MemCursor::new(Arc::clone(&m));
                        c.seek_to_first();
                        let mut prev: Option<Vec<u8>> = None;
                        while let Some(e) = c.entry() {
                            if let Some(p) = &prev {
                                assert_eq!(ikey::compare(p, e.ikey()), Ordering::Less);
                            }
                            let seqno = ikey::parse(e.ikey()).map(|p| p.seqno);
                            assert_eq!(
                                Some(e.value()),
                                seqno.map(u64::to_be_bytes).as_ref().map(|b| &b[..])
                            );
                            prev = Some(e.ikey().to_vec());
                            c.next();
                        }
                        for k in keys.iter().step_by(17) {
                            let guard = epoch::pin();
                            let seqnos: Vec<u64> =
                                m.versions(k, u64::MAX, &guard).map(|v| v.0).collect();
                            assert!(!seqnos.is_empty());
                            assert!(seqnos.windows(2).all(|w| w[0] > w[1]), "{seqnos:?}");
                        }
                        passes += 1;
                    }
                    passes
                })
            })
            .collect();
        let mut s = keys.len() as u64;
        for round in 0..30u32 {
            for k in &keys {
                s += 1;
                m.add(s, ValueKind::Put, k, &s.to_be_bytes());
            }
            // Some new keys too (skiplist inserts and index inserts under the readers).
            s += 1;
            m.add(
                s,
                ValueKind::Put,
                format!("n{round:03}").as_bytes(),
                &s.to_be_bytes(),
            );
        }
        done.store(true, AtomicOrdering::Release);
        for r in readers {
            assert!(r.join().expect("reader") > 0);
        }
        assert_eq!(cursor_entries(&m).len(), s as usize);
    }

    #[test]
    fn readers_find_every_published_key_while_the_index_grows_under_them() {
        // From an 8-slot index to thousands of slots: each key, once its `add` returned, must be found by
        // every later lookup, whichever generation of the index the reader holds.
        let m = Arc::new(MemTable::with_capacity(0, 0, 0));
        assert_eq!(m.index_slots(), 8);
        let published = Arc::new(AtomicU64::new(0));
        let key = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes();
        let n = 20_000u64;
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (m, published) = (Arc::clone(&m), Arc::clone(&published));
                std::thread::spawn(move || {
                    let mut checks = 0u64;
                    loop {
                        let upto = published.load(AtomicOrdering::Acquire);
                        for i in (r..upto).step_by(97) {
                            let guard = epoch::pin();
                            let v: Vec<u64> =
                                m.versions(&key(i), u64::MAX, &guard).map(|v| v.0).collect();
                            assert_eq!(v, vec![i + 1], "key {i} of {upto}");
                            checks += 1;
                        }
                        if upto == n {
                            return checks;
                        }
                    }
                })
            })
            .collect();
        for i in 0..n {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
            published.store(i + 1, AtomicOrdering::Release);
        }
        for r in readers {
            assert!(r.join().expect("reader") > 0);
        }
        assert!(m.index_slots() >= 16_384, "{}", m.index_slots());
    }

    #[test]
    fn growth_indexes_keys_a_full_window_left_out() {
        // 8 slots for 40 keys: 32 keys left out (only in the skiplist). A growth re-places them and indexes
        // all of them; absent keys are then ruled out.
        let m = MemTable::with_fixed_index(8);
        let key = |i: u64| format!("key{i:03}").into_bytes();
        for i in 0..40 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        let guard = epoch::pin();
        let found = |m: &MemTable| {
            (0..40)
                .filter(|&i| matches!(m.probe(&key(i), key_hash(&key(i)), &guard), Probe::Found(_)))
                .count()
        };
        assert_eq!(found(&m), 8);
        m.grow_index(1024, &guard);
        assert_eq!(m.index_slots(), 1024);
        assert_eq!(found(&m), 40);
        for i in 40..60 {
            assert!(matches!(
                m.probe(&key(i), key_hash(&key(i)), &guard),
                Probe::Missing { sure: true, .. }
            ));
        }
    }

    #[test]
    fn every_node_stays_indexed_or_listed_as_left_out_across_growths() {
        // Growth rebuilds from the old generation and the left-out list only: a node in neither would be
        // lost to the index, and a probe would then wrongly be sure the key is absent.
        let m = MemTable::with_fixed_index(8);
        let key = |i: u64| format!("key{i:04}").into_bytes();
        let guard = epoch::pin();
        let check = |m: &MemTable, n: u64| {
            let listed = m.index_left_out.lock().clone();
            let mut found = 0;
            for i in 0..n {
                match m.probe(&key(i), key_hash(&key(i)), &guard) {
                    Probe::Found(c) => {
                        found += 1;
                        assert!(!listed.contains(&(c as *const Chain as usize)));
                    }
                    Probe::Missing { sure, .. } => assert!(!sure, "key {i} lost by the index"),
                }
            }
            assert_eq!(
                found + listed.len(),
                n as usize,
                "indexed + left out != nodes"
            );
            found
        };
        for i in 0..40 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        assert_eq!(check(&m, 40), 8);
        m.grow_index(16, &guard);
        assert_eq!(check(&m, 40), 16);
        for i in 40..100 {
            m.add(i + 1, ValueKind::Put, &key(i), b"v");
        }
        check(&m, 100);
        m.grow_index(4096, &guard);
        assert_eq!(check(&m, 100), 100);
        assert!(m.index_left_out.lock().is_empty());
    }

    #[test]
    fn nodes_with_poisoned_slots_are_found_through_the_skiplist_before_and_after_growth() {
        // Half the keys get poisoned slots (their "address does not fit"): probes of their tag must answer
        // "don't know", reads must still find them, and growth must carry them over through the left-out
        // list instead of losing them.
        POISON_EVEN_HASHES.with(|p| p.set(true));
        let m = MemTable::new(0);
        let key = |i: u64| format!("key{i:05}").into_bytes();
        let n = 3 * MIN_INDEX_SLOTS as u64; // Several growths from the smallest index.
        for i in 0..n {
            m.add(i + 1, ValueKind::Put, &key(i), &i.to_be_bytes());
        }
        POISON_EVEN_HASHES.with(|p| p.set(false));
        assert!(
            m.index_growth_stats().0 >= 2,
            "{:?}",
            m.index_growth_stats()
        );
        let guard = epoch::pin();
        let poisoned = (0..n).filter(|&i| key_hash(&key(i)) % 2 == 0).count();
        assert!(poisoned > (n / 3) as usize);
        assert_eq!(m.index_left_out.lock().len(), poisoned);
        for i in 0..n {
            let k = key(i);
            match m.probe(&k, key_hash(&k), &guard) {
                Probe::Found(c) => {
                    assert_ne!(key_hash(&k) % 2, 0, "a poisoned node was dereferenced");
                    assert_eq!(c.user_key(), &k[..]);
                }
                Probe::Missing { sure, .. } => assert!(!sure, "key {i} ruled out"),
            }
            let mut seen = Vec::new();
            m.for_each_version(&k, u64::MAX, |_, _, v| {
                seen.push(v.to_vec());
                true
            });
            assert_eq!(seen, vec![i.to_be_bytes().to_vec()], "key {i}");
        }
    }

    #[test]
    fn dropping_a_memtable_frees_its_index() {
        let live = || LIVE_INDEX_TABLES.with(|c| c.get());
        let before = live();
        {
            let m = MemTable::with_capacity(0, 1 << 20, 1 << 12);
            for i in 0..100u64 {
                m.add(i + 1, ValueKind::Put, &i.to_be_bytes(), b"v");
            }
            assert_eq!(live(), before + 1);
        }
        assert_eq!(live(), before, "the current index generation leaked");
    }

    #[test]
    fn accounting_grows_with_versions_and_index() {
        let m = MemTable::with_capacity(0, 64 << 20, 0);
        // The index and the key filter (1/64 of the table) are charged from the start.
        let index = MIN_INDEX_SLOTS * 8 + (1 << 20);
        assert_eq!(m.approximate_bytes(), index);
        assert_eq!(
            MemTable::new(0).approximate_bytes(),
            MIN_INDEX_SLOTS * 8 + MIN_INDEX_SLOTS * START_BYTES_PER_SLOT / 64
        );
        m.add(1, ValueKind::Put, b"key", b"v");
        // A node is its chain and 8 bytes per level (its height is random).
        let node = m.approximate_bytes() - index;
        assert!(is_node_size(node), "{node}");
        m.add(2, ValueKind::Put, b"key", b"v2");
        let version = charge_version(3 + ikey::TRAILER_LEN, 2);
        assert_eq!(m.approximate_bytes(), index + node + version);
        // A large value is charged with its arena bytes, on a pushed version as on a node.
        m.add(3, ValueKind::Put, b"key", &[0u8; 100]);
        assert_eq!(
            m.approximate_bytes(),
            index + node + version + charge_version(3 + ikey::TRAILER_LEN, 100)
        );
        assert!(charge_version(11, 100) > charge_version(11, 2));
        assert_eq!(charge_version(11, 2), 48);
        // The index is charged as it grows: 0.7 of the smallest index filled doubles it.
        let mut i = 0u64;
        while m.index_slots() == MIN_INDEX_SLOTS {
            let before = m.approximate_bytes();
            m.add(10 + i, ValueKind::Put, &i.to_be_bytes(), b"v");
            let mut added = m.approximate_bytes() - before;
            if m.index_slots() != MIN_INDEX_SLOTS {
                added -= MIN_INDEX_SLOTS * 8;
            }
            assert!(is_node_size(added), "{added}");
            i += 1;
        }
        assert!(i as usize <= MIN_INDEX_SLOTS * 7 / 10 + 16, "{i}");
        assert_eq!(m.index_slots(), 2 * MIN_INDEX_SLOTS);
    }

    /// Whether `bytes` is what a small key's node is charged: its chain and 1 to `MAX_HEIGHT` next pointers.
    fn is_node_size(bytes: usize) -> bool {
        (1..=crate::lsm::skiplist::MAX_HEIGHT)
            .any(|h| bytes == charge_node(SkipList::<Chain>::node_bytes(h), 11, 1))
    }

    #[test]
    fn key_filter_keeps_every_inserted_key_and_rules_out_most_others() {
        let f = KeyFilter::new(64 << 10); // 512k bits
        let hashes: Vec<u64> = (0..65_536u64).map(|i| key_hash(&i.to_be_bytes())).collect();
        for &h in &hashes {
            f.insert(h);
        }
        assert!(
            hashes.iter().all(|&h| f.may_contain(h)),
            "no false negatives"
        );
        // 8 bits per key, 3 bits in one word: a few percent of absent keys pass.
        let passed = (1_000_000..1_100_000u64)
            .filter(|i| f.may_contain(key_hash(&i.to_be_bytes())))
            .count();
        assert!(passed < 10_000, "{passed} of 100000 absent keys passed");
    }

    #[test]
    fn new_keys_skip_the_index_probe_and_are_still_published() {
        let m = MemTable::with_capacity(0, 1 << 20, 1 << 14);
        for i in 0..2000u64 {
            m.add(i + 1, ValueKind::Put, &i.to_be_bytes(), b"v");
        }
        let guard = epoch::pin();
        for i in 0..2000u64 {
            let k = i.to_be_bytes();
            assert!(
                matches!(m.probe(&k, key_hash(&k), &guard), Probe::Found(_)),
                "{i} indexed"
            );
        }
        // A second version of each goes through the index (the filter says "maybe").
        for i in 0..2000u64 {
            m.add(3000 + i, ValueKind::Put, &i.to_be_bytes(), b"w");
        }
        let mut seen = Vec::new();
        m.for_each_version(&7u64.to_be_bytes(), u64::MAX, |s, _, v| {
            seen.push((s, v.to_vec()));
            true
        });
        assert_eq!(seen, vec![(3007, b"w".to_vec()), (8, b"v".to_vec())]);
    }

    #[test]
    #[should_panic(expected = "must be newer")]
    fn an_out_of_order_version_of_a_key_is_refused() {
        let m = MemTable::with_capacity(0, 1 << 20, 1 << 14);
        m.add(5, ValueKind::Put, b"k", b"new");
        m.add(7, ValueKind::Put, b"j", b"x");
        m.add(
            6,
            ValueKind::Put,
            b"k",
            b"older than the table's newest, newer than k's",
        );
        m.add(4, ValueKind::Put, b"k", b"old");
    }

    /// Heap bytes per new key and per pushed version actually allocated (glibc `mallinfo2`), for the memory
    /// accounting: run with `cargo test --release --lib memtable_bytes_per_entry -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn memtable_bytes_per_entry() {
        /// Bytes in use from glibc: the heap's and the mmap'ed chunks' (arena chunks of 1 MiB are mmap'ed).
        unsafe fn heap_in_use() -> usize {
            // SAFETY: `mallinfo2` only reads allocator statistics.
            let m = unsafe { libc::mallinfo2() };
            m.uordblks + m.hblkhd
        }
        for (klen, vlen) in [(12usize, 8usize), (20, 9), (10, 100), (40, 100)] {
            let n = 500_000u64;
            let mut key = vec![0u8; klen];
            let value = vec![7u8; vlen];
            // The index is sized up front (no generation is rebuilt and freed while measuring) and allocated
            // before the first reading: it is reported on its own.
            let m = MemTable::with_capacity(0, 64 << 20, 1 << 20);
            // SAFETY: `mallinfo2` only reads allocator statistics.
            let before = unsafe { heap_in_use() };
            for i in 0..n {
                key[klen - 8..]
                    .copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
                m.add(i + 1, ValueKind::Put, &key, &value);
            }
            // SAFETY: as above.
            let mid = unsafe { heap_in_use() };
            let index = m.index_slots() * 8 + m.new_keys.bytes();
            let charged_nodes = m.approximate_bytes() - index;
            for i in 0..n {
                key[klen - 8..]
                    .copy_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_be_bytes());
                m.add(n + i + 1, ValueKind::Put, &key, &value);
            }
            // SAFETY: as above.
            let after = unsafe { heap_in_use() };
            let per = |bytes: usize| bytes as f64 / n as f64;
            let (node, node_charged) = (per(mid - before), per(charged_nodes));
            let (version, version_charged) = (
                per(after - mid),
                per(m.approximate_bytes() - index - charged_nodes),
            );
            println!(
                "key {klen} value {vlen}: new key {node:.1} B allocated, {node_charged:.1} charged \
                 (+ index {:.1} B); version {version:.1} B allocated, {version_charged:.1} charged",
                per(index)
            );
            assert!((node_charged / node - 1.0).abs() < 0.05);
            assert!((version_charged / version - 1.0).abs() < 0.05);
        }
    }
}
