//! The read-modify-write cache's hash table: engine key hash → slot number, one `u64` per bucket.
//!
//! Open addressing with linear probing; a bucket holds `tag << 32 | slot`, where `tag` is the hash's high 32
//! bits, whose low bits also choose the home bucket. A lookup reads one bucket (usually one cache line),
//! compares tags, and only then the slot's key: one dependent load fewer than a table with separate control
//! bytes and buckets. Growth re-places the buckets from their tags alone (no slot is read); removal shifts
//! the following entries back (no tombstones).

/// An empty bucket (slot number `u32::MAX` is never used: the cache holds fewer than 2^32 slots).
const EMPTY: u64 = u64::MAX;

/// Buckets at first.
const MIN_BUCKETS: usize = 16;

pub(crate) struct SlotTable {
    buckets: Vec<u64>,
    len: usize,
}

impl SlotTable {
    /// The buckets a table needs to hold `entries` (at most 5/8 full), as `with_capacity` allocates them and
    /// as growth reaches them.
    fn buckets_for(entries: usize) -> usize {
        (entries.saturating_mul(8) / 5 + 1)
            .next_power_of_two()
            .max(MIN_BUCKETS)
    }

    /// A table that holds `entries` without growing.
    pub(crate) fn with_capacity(entries: usize) -> SlotTable {
        SlotTable {
            buckets: vec![EMPTY; Self::buckets_for(entries)],
            len: 0,
        }
    }

    /// The bytes of the buckets of a table holding `entries`: what the table grows to, at most, while it
    /// holds no more.
    pub(crate) fn bytes_for(entries: usize) -> usize {
        Self::buckets_for(entries).saturating_mul(std::mem::size_of::<u64>())
    }

    /// The bytes of the buckets now.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets.len() * std::mem::size_of::<u64>()
    }

    #[inline]
    fn tag(hash: u64) -> u64 {
        hash >> 32
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len() - 1
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of a key of `hash` for which `eq(slot)` holds.
    #[inline]
    pub(crate) fn find(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let tag = Self::tag(hash);
        let mask = self.mask();
        let mut pos = tag as usize & mask;
        loop {
            let e = *self.buckets.get(pos)?;
            if e == EMPTY {
                return None;
            }
            if e >> 32 == tag && eq(e as u32) {
                return Some(e as u32);
            }
            pos = (pos + 1) & mask;
        }
    }

    /// Hints the CPU to load the home bucket of `hash`, the first one [`find`](Self::find) reads. Never
    /// faults.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let pos = Self::tag(hash) as usize & self.mask();
        keyed_state_lsm::util::prefetch_read(self.buckets.as_ptr().wrapping_add(pos));
    }

    /// The slot in the home bucket of `hash` when its tag is `hash`'s: the slot [`find`](Self::find) most
    /// likely compares first (for prefetching; it may hold another key).
    #[inline]
    pub(crate) fn home(&self, hash: u64) -> Option<u32> {
        let tag = Self::tag(hash);
        let e = *self.buckets.get(tag as usize & self.mask())?;
        (e != EMPTY && e >> 32 == tag).then_some(e as u32)
    }

    /// Adds `slot` under `hash` (the caller knows no entry of the same key is held).
    pub(crate) fn insert(&mut self, hash: u64, slot: u32) {
        // Load factor at most 5/8: probe sequences stay short.
        if (self.len + 1) * 8 > self.buckets.len() * 5 {
            self.grow();
        }
        self.place((Self::tag(hash) << 32) | u64::from(slot));
        self.len += 1;
    }

    fn place(&mut self, e: u64) {
        let mask = self.mask();
        let mut pos = (e >> 32) as usize & mask;
        while self.buckets[pos] != EMPTY {
            pos = (pos + 1) & mask;
        }
        self.buckets[pos] = e;
    }

    #[cold]
    fn grow(&mut self) {
        let n = self.buckets.len() * 2;
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; n]);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }

    /// Removes the entry of `slot` under `hash`, if held.
    pub(crate) fn remove(&mut self, hash: u64, slot: u32) {
        let entry = (Self::tag(hash) << 32) | u64::from(slot);
        let mask = self.mask();
        let mut hole = (entry >> 32) as usize & mask;
        loop {
            match self.buckets[hole] {
                EMPTY => return,
                e if e == entry => break,
                _ => hole = (hole + 1) & mask,
            }
        }
        // Backward shift: an entry after the hole moves into it when the hole lies on its probe sequence
        // (between its home bucket and where it is).
        let mut next = (hole + 1) & mask;
        loop {
            let e = self.buckets[next];
            if e == EMPTY {
                break;
            }
            let home = (e >> 32) as usize & mask;
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.buckets[hole] = e;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
    }

    /// Removes every entry, keeping the buckets.
    pub(crate) fn clear(&mut self) {
        self.buckets.fill(EMPTY);
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_matches_a_map_through_inserts_removals_and_growth() {
        // Hashes whose tags collide in their low bits, so that removals shift entries back across clusters.
        let hash = |k: u32| (u64::from(k % 97) | u64::from(k) << 7) << 32;
        let mut t = SlotTable::with_capacity(0);
        let mut model = std::collections::HashSet::new();
        let mut x = 12345u64;
        for round in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = (x % 3000) as u32;
            if model.contains(&k) && round % 3 != 0 {
                t.remove(hash(k), k);
                model.remove(&k);
            } else if model.insert(k) {
                t.insert(hash(k), k);
            }
            assert_eq!(t.len(), model.len());
        }
        for k in 0..3000u32 {
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
}
