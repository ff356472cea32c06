//! The read-modify-write cache's hash table: engine key hash → slot number, one `u64` per bucket.
//!
//! Open addressing with linear probing; a bucket holds `tag << 32 | (slot + 1)`, where `tag` is the hash's
//! high 32 bits, whose low bits also choose the home bucket, and 0 is an empty bucket (so fresh buckets are
//! zeroed memory: no fill, and pages touched as used). A lookup reads one bucket (usually one cache line),
//! compares tags, and only then the slot's key: one dependent load fewer than a table with separate control
//! bytes and buckets. Removal shifts the following entries back (no tombstones).
//!
//! The table grows with its entries, doubling, and a growth is spread over the operations after it, so
//! that no operation zeroes or re-places every bucket: at the load limit the new buckets (fresh memory that
//! reads as zero, `buckets`: nothing zeroes them ahead) take every insertion, and each later insertion or
//! probe moves a few whole clusters (runs of full buckets) of the old buckets over, from an empty bucket
//! on. Moving whole clusters keeps the old buckets a valid table (every entry of a cluster has
//! its home bucket in it), and tells where a key is: one whose home bucket the growth has passed is in the
//! new buckets; any other is looked up in the old ones first, then (inserted since the growth) the new.

use super::buckets::Buckets;

/// An empty bucket.
const EMPTY: u64 = 0;

/// The most entries per 16 buckets: a table grows when an insertion would fill more than 13/16 of them.
/// A lookup of a key the table does not hold reads about 15 buckets at that load (two cache lines), one
/// that it holds about 3; after a growth the load is half that. 1M buckets hold 851,968 entries (at 5/8,
/// measured before, 655,360; a `hashbrown` table of 1M buckets, at 7/8, holds 917,504).
const LOAD_16THS: usize = 13;

/// Buckets at first.
const MIN_BUCKETS: usize = 16;

/// Old buckets a growth moves per insertion or probe, at least (whole clusters: it may move more). A
/// growth starts at 13/16 of the old buckets full and the next at 13/16 of twice as many: two per insertion
/// would finish in time; more keep the span in which misses probe twice short.
const MOVE_STEP: usize = 16;

pub(crate) struct SlotTable {
    buckets: Buckets,
    /// Entries held, in `buckets` and `old` together.
    len: usize,
    /// While a growth moves entries over: the buckets before it (else empty).
    old: Buckets,
    /// Where the growth moves the next cluster from (an empty bucket, or the start of a cluster).
    cursor: usize,
    /// Where the growth began (an empty bucket): the old buckets from here up to `cursor` are moved.
    start: usize,
    /// Old buckets the growth has yet to visit.
    unvisited: usize,
}

impl SlotTable {
    /// The buckets a table needs to hold `entries` (at most 13/16 full), as growth reaches them.
    fn buckets_for(entries: usize) -> usize {
        (entries.saturating_mul(16) / LOAD_16THS + 1)
            .next_power_of_two()
            .max(MIN_BUCKETS)
    }

    /// An empty table (it grows with its entries).
    pub(crate) fn new() -> SlotTable {
        SlotTable {
            buckets: Buckets::Heap(vec![EMPTY; MIN_BUCKETS]),
            len: 0,
            old: Buckets::default(),
            cursor: 0,
            start: 0,
            unvisited: 0,
        }
    }

    /// The bytes of the buckets of a table holding `entries`: what the table grows to, at most, while it
    /// holds no more (a growth keeps the old buckets, half as many, until it has moved their entries).
    pub(crate) fn bytes_for(entries: usize) -> usize {
        Self::buckets_for(entries).saturating_mul(std::mem::size_of::<u64>())
    }

    /// The bytes of the buckets now (the old ones too while a growth moves them).
    pub(crate) fn bytes(&self) -> usize {
        (self.buckets.len() + self.old.len()) * std::mem::size_of::<u64>()
    }

    #[inline]
    fn tag(hash: u64) -> u64 {
        hash >> 32
    }

    #[inline]
    fn entry(tag: u64, slot: u32) -> u64 {
        (tag << 32) | (u64::from(slot) + 1)
    }

    #[inline]
    fn slot_of(e: u64) -> u32 {
        (e as u32).wrapping_sub(1)
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a growth is still moving entries over.
    #[inline]
    pub(crate) fn growing(&self) -> bool {
        !self.old.is_empty()
    }

    /// The slot of a key of `hash` for which `eq(slot)` holds.
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = Self::tag(hash);
        if self.old.is_empty() || self.moved(tag) {
            return find_in(&self.buckets, tag, &mut eq);
        }
        // Not moved yet: a key held before the growth is in the old buckets, one inserted since in the new.
        find_in(&self.old, tag, &mut eq).or_else(|| find_in(&self.buckets, tag, &mut eq))
    }

    /// Whether the growth has moved the old cluster of a key of `tag`: every key held there is in the new
    /// buckets (the growth moves whole clusters, from an empty bucket on).
    #[inline]
    fn moved(&self, tag: u64) -> bool {
        let mask = self.old.len() - 1;
        let home = tag as usize & mask;
        home.wrapping_sub(self.start) & mask < self.old.len() - self.unvisited
    }

    /// Hints the CPU to load the home bucket of `hash`, the first one [`find`](Self::find) reads. Never
    /// faults.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let pos = Self::tag(hash) as usize & (self.buckets.len() - 1);
        keyed_state_lsm::util::prefetch_read(self.buckets.as_ptr().wrapping_add(pos));
    }

    /// The slot in the home bucket of `hash` when its tag is `hash`'s: the slot [`find`](Self::find) most
    /// likely compares first (for prefetching; it may hold another key).
    #[inline]
    pub(crate) fn home(&self, hash: u64) -> Option<u32> {
        let tag = Self::tag(hash);
        let e = *self.buckets.get(tag as usize & (self.buckets.len() - 1))?;
        (e != EMPTY && e >> 32 == tag).then_some(Self::slot_of(e))
    }

    /// Whether one more entry fits: grows the table when the next insertion would pass the load limit;
    /// false when the memory for that growth is refused (the table unchanged, at its limit).
    pub(crate) fn make_room(&mut self) -> bool {
        (self.len + 1) * 16 <= self.buckets.len() * LOAD_16THS || self.grow()
    }

    /// Adds `slot` under `hash` (the caller knows no entry of the same key is held, and has made room for
    /// it, [`make_room`](Self::make_room)). Without room it still fills the buckets past the load limit,
    /// and with one empty bucket left aborts as for any refused allocation.
    pub(crate) fn insert(&mut self, hash: u64, slot: u32) {
        if self.growing() {
            self.step();
        }
        if !self.make_room() && self.len + 2 > self.buckets.len() {
            std::alloc::handle_alloc_error(std::alloc::Layout::new::<[u64; 2]>());
        }
        place(&mut self.buckets, Self::entry(Self::tag(hash), slot));
        self.len += 1;
    }

    /// Moves some of a growth's old entries over (for probes, which do not insert).
    #[inline]
    pub(crate) fn advance(&mut self) {
        if self.growing() {
            self.step();
        }
    }

    /// Starts a growth; false when its buckets are refused.
    #[cold]
    fn grow(&mut self) -> bool {
        // A growth begun before is finished first (it normally is by now: the next one starts once the
        // entries have doubled, and each insertion since moved at least 16 old buckets where two would do).
        while self.growing() {
            self.step();
        }
        let Some(next) = Buckets::zeroed(self.buckets.len() * 2) else {
            return false;
        };
        self.old = std::mem::replace(&mut self.buckets, next);
        // Start at an empty bucket (one exists: the table is at most 13/16 full), so no cluster is cut.
        self.cursor = self.old.iter().position(|&e| e == EMPTY).unwrap_or(0);
        self.start = self.cursor;
        self.unvisited = self.old.len();
        true
    }

    /// Moves whole clusters of old buckets over, at least [`MOVE_STEP`] buckets visited; drops the old
    /// buckets once all are visited.
    #[cold]
    fn step(&mut self) {
        let mask = self.old.len() - 1;
        let mut visited = 0;
        while self.unvisited > 0 {
            let e = self.old[self.cursor];
            if e == EMPTY {
                if visited >= MOVE_STEP {
                    break;
                }
            } else {
                place(&mut self.buckets, e);
                self.old[self.cursor] = EMPTY;
            }
            self.cursor = (self.cursor + 1) & mask;
            self.unvisited -= 1;
            visited += 1;
        }
        if self.unvisited == 0 {
            self.old = Buckets::default();
        }
    }

    /// Removes the entry of `slot` under `hash`, if held.
    pub(crate) fn remove(&mut self, hash: u64, slot: u32) {
        let entry = Self::entry(Self::tag(hash), slot);
        if remove_from(&mut self.buckets, entry) || remove_from(&mut self.old, entry) {
            self.len -= 1;
        }
    }

    /// Removes every entry, keeping as many buckets (fresh ones; the old ones zeroed if refused).
    pub(crate) fn clear(&mut self) {
        match Buckets::zeroed(self.buckets.len()) {
            Some(b) => self.buckets = b,
            None => self.buckets.fill(EMPTY),
        }
        self.old = Buckets::default();
        self.unvisited = 0;
        self.len = 0;
    }
}

/// The slot of a key of tag `tag` in `buckets` (a power of two of them, or none) for which `eq` holds.
#[inline]
fn find_in(buckets: &[u64], tag: u64, eq: &mut impl FnMut(u32) -> bool) -> Option<u32> {
    let mask = buckets.len().wrapping_sub(1);
    let mut pos = tag as usize & mask;
    loop {
        let e = *buckets.get(pos)?;
        if e == EMPTY {
            return None;
        }
        if e >> 32 == tag && eq(SlotTable::slot_of(e)) {
            return Some(SlotTable::slot_of(e));
        }
        pos = (pos + 1) & mask;
    }
}

/// Puts entry `e` into the first empty bucket from its home.
fn place(buckets: &mut [u64], e: u64) {
    let mask = buckets.len() - 1;
    let mut pos = (e >> 32) as usize & mask;
    while buckets[pos] != EMPTY {
        pos = (pos + 1) & mask;
    }
    buckets[pos] = e;
}

/// Removes `entry` from `buckets` (backward shift), if there; whether it was.
fn remove_from(buckets: &mut [u64], entry: u64) -> bool {
    if buckets.is_empty() {
        return false;
    }
    let mask = buckets.len() - 1;
    let mut hole = (entry >> 32) as usize & mask;
    loop {
        match buckets[hole] {
            EMPTY => return false,
            e if e == entry => break,
            _ => hole = (hole + 1) & mask,
        }
    }
    // Backward shift: an entry after the hole moves into it when the hole lies on its probe sequence
    // (between its home bucket and where it is).
    let mut next = (hole + 1) & mask;
    loop {
        let e = buckets[next];
        if e == EMPTY {
            break;
        }
        let home = (e >> 32) as usize & mask;
        if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
            buckets[hole] = e;
            hole = next;
        }
        next = (next + 1) & mask;
    }
    buckets[hole] = EMPTY;
    true
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::buckets::tests::{is_mapped, MAPS};
    use super::*;

    /// Whether the table's buckets (and, during a growth, its old ones) are mapped.
    pub(in crate::backend::lsm_cache) fn mapped(t: &SlotTable) -> (bool, bool) {
        (is_mapped(&t.buckets), is_mapped(&t.old))
    }

    /// Hashes whose tags collide in their low bits, so that clusters form and removals shift entries back.
    fn hash(k: u32) -> u64 {
        (u64::from(k % 97) | u64::from(k) << 7) << 32
    }

    #[test]
    fn the_table_matches_a_map_through_inserts_removals_and_growth() {
        let mut t = SlotTable::new();
        let mut model = std::collections::HashSet::new();
        let mut x = 12345u64;
        let mut on_map = false;
        // Fewer under Miri: still hundreds of entries, so the buckets grow into maps (`MAP_BYTES`).
        let (rounds, keys) = if cfg!(miri) {
            (4000, 800)
        } else {
            (20_000, 3000)
        };
        for round in 0..rounds {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % keys) as u32;
            if model.contains(&k) && round % 3 != 0 {
                t.remove(hash(k), k);
                model.remove(&k);
            } else if model.insert(k) {
                t.insert(hash(k), k);
            }
            assert_eq!(t.len(), model.len());
            on_map |= mapped(&t).0;
        }
        assert_eq!(on_map, MAPS, "the model ran on mapped buckets");
        for k in 0..keys as u32 {
            assert_eq!(
                t.find(hash(k), |s| s == k),
                model.get(&k).copied(),
                "key {k}"
            );
        }
        t.clear();
        assert!(t.is_empty());
        assert_eq!(t.find(hash(1), |_| true), None);
    }

    #[test]
    fn every_entry_is_found_while_a_growth_moves_it_and_after() {
        let mut t = SlotTable::new();
        let mut model = std::collections::BTreeSet::new();
        let mut saw_growth = false;
        let mut mapped_growth = false;
        let mut x = 99u64;
        // Fewer under Miri: still growths from mapped old buckets to mapped new ones (from 512 buckets).
        for k in 0..if cfg!(miri) { 1200u32 } else { 5000 } {
            t.insert(hash(k), k);
            model.insert(k);
            // Removals and probes in the middle of growths too.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 4 == 0 {
                let victim = (x % u64::from(k + 1)) as u32;
                if model.remove(&victim) {
                    t.remove(hash(victim), victim);
                }
            }
            if x % 5 == 0 {
                t.advance();
            }
            saw_growth |= t.growing();
            mapped_growth |= t.growing() && mapped(&t) == (true, true);
            if t.growing() || k % 512 == 0 {
                for &m in &model {
                    assert_eq!(t.find(hash(m), |s| s == m), Some(m), "key {m} after {k}");
                }
                assert_eq!(t.find(hash(k + 1), |s| s == k + 1), None);
            }
            assert_eq!(t.len(), model.len());
        }
        assert!(saw_growth, "the test ran through growths");
        assert_eq!(
            mapped_growth, MAPS,
            "from mapped old buckets to mapped new ones"
        );
        // A growth ends: its old buckets are given back.
        while t.growing() {
            t.advance();
        }
        assert!(t.old.is_empty());
        assert_eq!(t.bytes(), t.buckets.len() * std::mem::size_of::<u64>());
        for &m in &model {
            assert_eq!(t.find(hash(m), |s| s == m), Some(m));
        }
    }

    #[test]
    fn a_large_table_grows_into_fresh_mapped_buckets_and_zeroes_none_ahead() {
        let mut t = SlotTable::new();
        let mut k = 0u32;
        // Up to the last entry before the growth to 256K buckets (2 MiB; under Miri to 2K buckets, 16 KiB,
        // still a map: `MAP_BYTES`): nothing beyond the buckets in use.
        let from: usize = if cfg!(miri) { 1 << 10 } else { 128 << 10 };
        while (k as usize + 1) * 16 <= from * LOAD_16THS {
            t.insert(hash(k), k);
            k += 1;
        }
        while t.growing() {
            t.advance();
        }
        assert_eq!(t.buckets.len(), from);
        assert_eq!(t.bytes(), from * std::mem::size_of::<u64>());
        t.insert(hash(k), k);
        assert_eq!(t.buckets.len(), 2 * from);
        #[cfg(target_os = "linux")]
        assert!(matches!(t.buckets, Buckets::Mapped(_)));
        for m in (0..=k).step_by(101) {
            assert_eq!(t.find(hash(m), |s| s == m), Some(m));
        }
    }

    #[test]
    fn a_refused_growth_leaves_the_table_whole_at_its_limit_until_memory_is_given() {
        use super::super::buckets::tests::REFUSE;
        let mut t = SlotTable::new();
        for k in 0..13u32 {
            assert!(t.make_room());
            t.insert(hash(k), k);
        }
        REFUSE.set(true);
        assert!(!t.make_room());
        assert_eq!((t.buckets.len(), t.growing()), (16, false));
        // An insertion without room still fits while a bucket stays empty.
        t.insert(hash(13), 13);
        REFUSE.set(false);
        assert!(t.make_room());
        assert_eq!(t.buckets.len(), 32);
        assert!((0..14).all(|k| t.find(hash(k), |s| s == k) == Some(k)));
    }

    #[test]
    fn a_table_fills_thirteen_of_sixteen_buckets_before_it_grows() {
        let mut t = SlotTable::new();
        for k in 0..13u32 {
            t.insert(hash(k), k);
        }
        assert_eq!((t.buckets.len(), t.growing()), (16, false));
        t.insert(hash(13), 13);
        assert_eq!(t.buckets.len(), 32);
        assert_eq!(SlotTable::bytes_for(12), 16 * 8);
        assert_eq!(SlotTable::bytes_for(14), 32 * 8);
    }
}
