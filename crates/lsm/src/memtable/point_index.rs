//! The point index from user key to skiplist node: open addressing in generations that the writer grows by
//! doubling, rebuilt from the previous generation's slots and the list of nodes it left out, and swapped in
//! whole (readers keep the generation they loaded; the epoch collector frees a replaced one).

use std::sync::atomic::Ordering as AtomicOrdering;

use crate::sync::AtomicU64;
use crate::words::Words;

use super::versions::Chain;
use crate::prefetch::prefetch_read;

/// The hash a memtable's point index is probed with (computed once per lookup, shared by all memtables).
#[inline]
pub(crate) fn key_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Slots a table's point index starts with at most, unless its size hint asks for more: 32 KiB.
pub(crate) const MIN_INDEX_SLOTS: usize = 1 << 12;

/// Memtable bytes per slot of a fresh index (a small table's index starts at 1/32 of its capacity).
pub(super) const START_BYTES_PER_SLOT: usize = 256;

/// The index doubles when more than `GROW_NUM / GROW_DEN` of its slots are taken (linear probing stays
/// short: at 0.7 a lookup of a present key looks at ≈ 2 slots, usually one cache line; 8 bytes a slot make
/// 11–23 bytes of index per key).
pub(super) const GROW_NUM: usize = 7;
/// See [`GROW_NUM`].
pub(super) const GROW_DEN: usize = 10;

/// Slots a probe looks at before giving up ("don't know": the caller searches the skiplist).
const PROBE_WINDOW: usize = 32;

/// Bits of a slot holding the node's address (user-space addresses of x86-64 and AArch64 Linux fit).
const ADDR_BITS: u32 = 48;
/// Mask of the address part of a slot.
pub(super) const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;

/// The address part of a slot whose node's address does not fit in [`ADDR_BITS`]: "a key with this tag is
/// only in the skiplist" (never a node's address: nodes are 8-aligned).
pub(super) const POISON: u64 = 1;

/// The tag a slot keeps of a key's [`key_hash`] `h`: its low bits.
#[inline]
fn tag(h: u64) -> u64 {
    h & (u64::MAX >> ADDR_BITS)
}

/// What a probe of the point index found.
pub(super) enum Probe<'a> {
    /// The key's node.
    Found(&'a Chain),
    /// Not found in the window.
    Missing {
        /// The empty slot the probe reached, where the key's insert would go (None: the window is full).
        free: Option<usize>,
        /// Whether the key is certainly not in the table (the probe reached an empty slot).
        sure: bool,
    },
}

/// One generation of a memtable's point index: open addressing with linear probing. A slot is 0 (empty) or
/// `tag << 48 | address` of a node of the table's skiplist (`tag`: the low 16 bits of [`key_hash`]), or
/// `tag << 48 | POISON` for a node whose address does not fit 48 bits (probes of that tag answer "don't
/// know"). Written only by the table's writer, each slot once (0 -> value, Release); read with Acquire.
pub(super) struct IndexTable {
    /// The slots (0: empty).
    pub(super) slots: Words<AtomicU64>,
    /// Tests of `MemTable::drop`: which generation this is ([`LIVE_INDEX_TABLES`]).
    #[cfg(test)]
    id: u64,
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
    pub(super) fn prefetch_home(&self, h: u64) {
        if let Some(slot) = self.slots.get(self.home(h)) {
            prefetch_read(slot);
        }
    }

    /// An empty generation of `n` slots.
    pub(super) fn new(n: usize) -> Self {
        IndexTable {
            // Loom's atomics are not plain words: heap only there.
            #[cfg(not(loom))]
            slots: Words::zeroed(n),
            #[cfg(loom)]
            slots: Words::from_default(n),
            #[cfg(test)]
            id: live_index_tables::made(),
        }
    }

    /// Looks `user_key` (hash `h`) up.
    #[inline]
    pub(super) fn probe<'a>(&'a self, user_key: &[u8], h: u64) -> Probe<'a> {
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
    pub(super) fn publish(&self, i: usize, slot_value: u64) {
        if let Some(slot) = self.slots.get(i) {
            debug_assert_eq!(slot.load(AtomicOrdering::Relaxed), 0);
            slot.store(slot_value, AtomicOrdering::Release);
        }
    }

    /// Fills this empty generation with every node of the table: those `old` points to and those it left out
    /// (`left_out`). Returns the slots taken and the nodes this generation leaves out.
    pub(super) fn rebuild_from(&self, old: &IndexTable, left_out: &[usize]) -> (usize, Vec<usize>) {
        let new = self;
        /// Slots ahead of the scan whose nodes are prefetched (≈ 11 nodes at the 0.7 load of a grow).
        const AHEAD: usize = 16;
        let mut used = 0;
        let mut still_left_out = Vec::new();
        let mut place = |addr: usize| {
            // SAFETY: `addr` is that of a `Chain` inside a node of this table's skiplist (a slot's address,
            // as in `IndexTable::probe`, or one `MemTable::publish` recorded as left out), and nodes live as
            // long as the table, which the caller (`MemTable::grow_index`, the writer) borrows.
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

    /// Bytes allocated.
    pub(super) fn bytes(&self) -> usize {
        self.slots.len() * 8
    }
}

#[cfg(test)]
/// Index generations alive, by id, and the ids made on each thread (tests of `MemTable::drop`). By id, not a
/// per-thread count: a generation replaced by a growth is freed by the epoch collector, on whichever thread
/// collects it.
#[cfg(test)]
pub(super) mod live_index_tables {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    static NEXT: AtomicU64 = AtomicU64::new(0);
    static LIVE: Mutex<BTreeSet<u64>> = Mutex::new(BTreeSet::new());
    thread_local! {
        static MADE_HERE: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    pub(in crate::memtable) fn made() -> u64 {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        MADE_HERE.with(|m| m.borrow_mut().push(id));
        id
    }

    pub(in crate::memtable) fn freed(id: u64) {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// The ids made on this thread so far.
    pub(in crate::memtable) fn made_here() -> Vec<u64> {
        MADE_HERE.with(|m| m.borrow().clone())
    }

    /// Whether generation `id` is alive.
    pub(in crate::memtable) fn is_live(id: u64) -> bool {
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).contains(&id)
    }
}

#[cfg(test)]
impl Drop for IndexTable {
    fn drop(&mut self) {
        live_index_tables::freed(self.id);
    }
}

/// The slot value recording `chain` with key hash `h`.
#[inline]
pub(super) fn slot_value(h: u64, chain: &Chain) -> u64 {
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
    pub(super) static POISON_EVEN_HASHES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Asks the CPU for the cache lines holding the start of the node at `addr` (its key, when inline): a hint,
/// it never faults.
#[inline(always)]
fn prefetch_node(addr: u64) {
    let p = addr as usize as *const u8;
    prefetch_read(p);
    prefetch_read(p.wrapping_add(48));
}
