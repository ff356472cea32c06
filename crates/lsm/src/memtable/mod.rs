//! The in-memory write buffer: an insert-only skiplist ([`SkipList`], lock-free for readers) with one node
//! per user key, each node holding the key's versions as a chain (newest first), a point index from user key
//! to node, and memory accounting. Nodes, versions and large entries' bytes all live in the table's arena.
//!
//! Entries live *inside* the skiplist nodes and versions ([`entry`]): an entry whose internal key and value
//! fit in the node (every entry of the state backends' fixed-width keys) is stored inline, so a new key is
//! one arena allocation (the node, holding its first version) and each further version of a key one more
//! (a version pushed onto the node's chain, [`versions`]). An update of a key already in the table finds its
//! node through the point index ([`point_index`]: open addressing, one probe of usually one cache line) and
//! pushes a version: no skiplist search. A point lookup is an index probe and a walk down the chain; the
//! skiplist is searched only for new keys and when the index does not know a key (its probe window is
//! full). A key the writer's filter ([`key_filter`]) rules out (certainly new) skips the index probe and
//! goes straight to the skiplist search. Readers walk the list with plain Acquire loads (nodes are never
//! removed; an epoch guard only protects the index's generations); [`MemCursor`] ([`cursor`]) is a cursor
//! that holds an `Arc` of its table, for iterators that outlive a borrow. The internal-key view (user key
//! ascending, seqno descending) is the same as a skiplist of internal keys: nodes in user-key order, each
//! chain newest first. Each write charges its table the bytes it allocates ([`accounting`]).

mod accounting;
mod cursor;
mod entry;
mod index_cell;
mod indexing;
mod key_filter;
mod point_index;
mod versions;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering as AtomicOrdering};

pub(crate) use crossbeam_epoch as epoch;
use parking_lot::RwLock;

use self::accounting::{arena_chunk_size, charge_node, charge_version};
pub(crate) use self::cursor::MemCursor;
use self::entry::key_word;
pub(crate) use self::entry::MemEntry;
use self::index_cell::IndexCell;
use self::key_filter::KeyFilter;
pub(crate) use self::point_index::key_hash;
use self::point_index::{IndexTable, Probe, MIN_INDEX_SLOTS, START_BYTES_PER_SLOT};
use self::versions::Chain;
pub(crate) use self::versions::Versions;
use super::arena::Arena;
use super::env::write_buffer::{MemCharge, WriteBuffers};
use super::ikey::{self, ValueKind};
use super::rangedel::RangeTombstone;
use super::skiplist::{Inserted, SkipList};

/// A memtable. Entries are never removed; the whole table is dropped after it is flushed.
///
/// One writer at a time calls [`add`](Self::add) (the engine's write lock serialises every write, and the
/// WAL replay is single-threaded), concurrently with any number of readers.
pub(crate) struct MemTable {
    /// One node per user key, by user key (insert-only: nodes live until the table is dropped). Its arena
    /// also holds the pushed versions and the bytes of entries too large for their node.
    list: SkipList<Chain>,
    /// Point index, grown by the writer (doubling, rebuilt from its slots) and swapped in whole: readers keep
    /// using the generation they loaded, which is freed through the epoch collector once none can hold it
    /// (the current one when the table is dropped; [`index_cell`]).
    index: IndexCell,
    /// Slots taken in the current index generation (writer only).
    index_used: AtomicUsize,
    /// Index growths so far, and the microseconds the writer spent in them.
    index_growths: AtomicU64,
    /// See `index_growths`.
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
    /// Bytes charged so far ([`approximate_bytes`](Self::approximate_bytes)).
    bytes: AtomicUsize,
    /// The table's charge to its environment's write-buffer manager (none for tables outside an engine's
    /// memtable list: WAL replay, tests).
    wb_charge: Option<MemCharge>,
    /// The largest seqno added.
    max_seqno: AtomicU64,
    /// The range tombstones added.
    range_dels: RwLock<Vec<RangeTombstone>>,
    /// Number of range tombstones, read without the lock (most memtables hold none).
    range_del_count: AtomicUsize,
    /// The WAL file that holds this memtable's writes (0 without a WAL).
    pub wal_number: u64,
    /// Set while `add` runs (debug builds): catches a second concurrent writer.
    #[cfg(debug_assertions)]
    writing: std::sync::atomic::AtomicBool,
}

/// A memtable's first point index, allocated (and zeroed) ahead of time ([`MemTable::with_spare_index`]),
/// with its charge to the write-buffer manager until a table takes it (which then charges it itself).
pub struct SpareIndex {
    table: IndexTable,
    /// Held for its drop: the charge ends when a table takes the index.
    _charge: Option<MemCharge>,
}

impl SpareIndex {
    /// An empty index of `slots` slots (a power of two, as [`MemTable::index_slots_for`] gives), charged to
    /// `wb` if given.
    pub fn new(slots: usize, wb: Option<&std::sync::Arc<WriteBuffers>>) -> Self {
        let table = IndexTable::new(slots);
        let charge = wb.map(|wb| MemCharge::new(wb, table.bytes(), table.bytes()));
        SpareIndex {
            table,
            _charge: charge,
        }
    }

    /// Its number of slots.
    pub fn slots(&self) -> usize {
        self.table.bytes() / 8
    }
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
        let index = IndexTable::new(Self::index_slots_for(capacity_bytes, index_slots));
        Self::with_index(wal_number, capacity_bytes, index)
    }

    /// The slots of the first point index of [`with_capacity`](Self::with_capacity)`(_, capacity_bytes,
    /// index_slots)`.
    pub fn index_slots_for(capacity_bytes: usize, index_slots: usize) -> usize {
        let start = (capacity_bytes / START_BYTES_PER_SLOT).clamp(8, MIN_INDEX_SLOTS);
        index_slots.max(start).next_power_of_two()
    }

    /// [`with_capacity`](Self::with_capacity) with a point index allocated ahead of time (on a background
    /// thread, so that a memtable switch does not zero it): `spare` is used when it has exactly the slots
    /// `with_capacity` would allocate, and handed back otherwise.
    pub fn with_spare_index(
        wal_number: u64,
        capacity_bytes: usize,
        index_slots: usize,
        spare: SpareIndex,
    ) -> (Self, Option<SpareIndex>) {
        let slots = Self::index_slots_for(capacity_bytes, index_slots);
        if spare.slots() == slots {
            (
                Self::with_index(wal_number, capacity_bytes, spare.table),
                None,
            )
        } else {
            (
                Self::with_capacity(wal_number, capacity_bytes, index_slots),
                Some(spare),
            )
        }
    }

    fn with_index(wal_number: u64, capacity_bytes: usize, index: IndexTable) -> Self {
        let new_keys = KeyFilter::new(capacity_bytes / 64);
        Self {
            list: SkipList::new(Arena::new(arena_chunk_size(capacity_bytes))),
            bytes: AtomicUsize::new(index.bytes() + new_keys.bytes()),
            wb_charge: None,
            index: IndexCell::new(index),
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
        self.charge(charged);
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
        chain.push(entry, arena);
    }

    /// Charges the table `bytes` more (the writer only), and its write-buffer manager when the charge passes
    /// its reserved step.
    #[inline]
    fn charge(&self, bytes: usize) {
        let now = self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed) + bytes;
        if let Some(c) = &self.wb_charge {
            c.grow_to(now);
        }
    }

    /// Makes the table charge `wb` for its memory, from now on, in steps of its arena's chunks.
    pub fn charge_to(mut self, wb: &std::sync::Arc<WriteBuffers>) -> Self {
        self.wb_charge = Some(MemCharge::new(
            wb,
            self.approximate_bytes(),
            self.list.arena().chunk_size(),
        ));
        self
    }

    /// Its charge to the write-buffer manager, if any.
    pub fn wb_charge(&self) -> Option<&MemCharge> {
        self.wb_charge.as_ref()
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

    /// Whether the table holds an entry (a value, a merge operand or a point delete, at any seqno) whose
    /// user key starts with `prefix`: one skiplist search.
    pub fn holds_prefix(&self, prefix: &[u8]) -> bool {
        if self.list.is_empty() {
            return false;
        }
        let word = key_word(prefix);
        self.list
            .lower_bound(|c| c.cmp_to(prefix, word))
            .is_some_and(|n| n.get().user_key().starts_with(prefix))
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
        Versions::new(self.chain(user_key, h, guard), snapshot)
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
