//! Maps the cache holds whole ("complete", `map_marks`): setting the mark when a scan has taken the
//! engine's entries of a map in, reading a marked map's slots, keeping the mark's slot list as the map is
//! written, and dropping the mark when an entry of the map leaves the cache or a write of the map goes
//! around it.

use super::{map_prefix_of, Bytes, RmwCache, ENTRY_OVERHEAD};

/// A fill takes in at most this fraction of the capacity (as new entries): one large map does not flood
/// the cache.
const FILL_SHARE: usize = 8;

impl RmwCache {
    /// Whether the map `prefix` is marked complete: every entry of it with a value is in the cache.
    #[inline]
    pub(crate) fn is_map_complete(&self, prefix: &[u8]) -> bool {
        !self.marks.is_empty() && self.marks.contains(prefix)
    }

    /// Whether the map `prefix` is complete, its slot list then sorted by key for
    /// [`complete_slots`](Self::complete_slots). The list is sorted (and its slots checked: a listed slot that
    /// no longer holds an entry of the map, which cannot happen as its removal drops the mark, drops the
    /// mark) only after a write listed a slot, so a scan of a large map in batches costs each batch its own
    /// entries and a binary search.
    pub(crate) fn sort_complete(&mut self, prefix: &[u8]) -> bool {
        if self.marks.is_empty() {
            return false;
        }
        let slots = &self.slots;
        let Some(mark) = self.marks.get_mut(prefix) else {
            return false;
        };
        if mark.sorted {
            return true;
        }
        let of_map = |i: u32| matches!(slots.get(i as usize), Some(Some(s)) if map_prefix_of(s) == Some(prefix));
        if !mark.slots.iter().all(|&i| of_map(i)) {
            debug_assert!(false, "a complete map lists a slot of another key");
            self.unmark_map(prefix);
            return false;
        }
        let key_of = |i: u32| match slots.get(i as usize) {
            Some(Some(s)) => s.key.as_slice(),
            _ => &[],
        };
        // A slot listed twice has the same key: the repeats end up side by side.
        mark.slots
            .sort_unstable_by(|&a, &b| key_of(a).cmp(key_of(b)));
        mark.slots.dedup();
        mark.sorted = true;
        true
    }

    /// The slots of the complete map `prefix` (values, dirty deletes, absent keys), sorted by key when
    /// [`sort_complete`](Self::sort_complete) said so since the last change, read in place: read them with
    /// [`map_entry`](Self::map_entry) until the cache changes. Empty when the map is not complete.
    pub(crate) fn complete_slots(&self, prefix: &[u8]) -> &[u32] {
        if self.marks.is_empty() {
            return &[];
        }
        self.marks.get(prefix).map_or(&[], |m| &m.slots)
    }

    /// A clear of the map `prefix`, when it is complete: every listed entry with a value becomes a dirty
    /// delete, also a clean one the engine no longer holds (a TTL compaction filter drops expired entries
    /// behind the cache), which a clear that deletes only the engine's entries would leave for later scans
    /// of the map, still marked, to return.
    pub(crate) fn delete_complete_map(&mut self, prefix: &[u8]) {
        if !self.sort_complete(prefix) {
            return;
        }
        let listed = self.complete_slots(prefix).to_vec();
        for i in listed {
            let key = match self.slots.get(i as usize) {
                Some(Some(s)) if s.value.is_some() => s.key.as_slice().to_vec(),
                _ => continue,
            };
            self.write_map(Some(i), &key, prefix.len(), None);
        }
    }

    /// Drops the map `prefix`'s mark, if any (its bytes are given back to the capacity); every mark when
    /// maps of its state are marked with prefixes of another length (one of them may hold `prefix`'s keys).
    pub(crate) fn unmark_map(&mut self, prefix: &[u8]) {
        if self.marks.is_empty() {
            return;
        }
        let before = self.marks.bytes;
        if self.marks.other_width(prefix) {
            self.marks.clear();
        } else {
            self.marks.remove(prefix);
        }
        self.used = self.used + self.marks.bytes - before;
    }

    /// After a write turned slot `i` (a key of the map `prefix`) dirty from clean or new: a complete map
    /// lists it. A sorted list is searched first (a TTL removal or re-stamp of a listed entry leaves it as
    /// it is) and stays sorted when the key comes after its last; any other key unsorts it until the next
    /// scan.
    pub(super) fn note_map_entry(&mut self, prefix: &[u8], i: u32) {
        if self.marks.other_width(prefix) {
            // A map of another prefix length than the marked ones of its state: a marked map whose prefix
            // is a prefix of this one's would not list the entry its scan must see.
            self.used -= self.marks.bytes;
            self.marks.clear();
            return;
        }
        let before = self.marks.bytes_of(prefix);
        let slots = &self.slots;
        let Some(mark) = self.marks.get_mut(prefix) else {
            return;
        };
        let key_of = |i: u32| match slots.get(i as usize) {
            Some(Some(s)) => s.key.as_slice(),
            _ => &[],
        };
        if mark.sorted {
            let key = key_of(i);
            match mark.slots.binary_search_by(|&l| key_of(l).cmp(key)) {
                Ok(at) if mark.slots.get(at) == Some(&i) => return,
                Err(at) if at == mark.slots.len() => {}
                _ => mark.sorted = false,
            }
        }
        if !mark.sorted && mark.slots.len() == mark.slots.capacity() {
            // Repeats go before the list grows: it stays within twice the map's entries.
            mark.slots.sort_unstable();
            mark.slots.dedup();
        }
        mark.slots.push(i);
        let total = self.marks.bytes;
        self.marks.recount(prefix, before);
        self.used = self.used + self.marks.bytes - total;
    }

    /// Whether a scan of the map `prefix` should try to take it in whole ([`fill_entry`](Self::fill_entry)):
    /// the cache is in use, has room, and gave up on no fill of the map lately.
    pub(crate) fn may_fill(&self, prefix: &[u8]) -> bool {
        self.is_active() && self.used < self.capacity && !self.marks.tried(prefix)
    }

    /// The bytes of new entries a fill may take in.
    pub(crate) fn fill_budget(&self) -> usize {
        self.capacity / FILL_SHARE
    }

    /// A fill of the map whose prefix is `key`'s first `prefix_len` bytes takes in the engine's entry
    /// `key` → `value`: a key the cache holds is only listed (its clean value is the engine's; a dirty one
    /// overrides it), a new one is inserted clean while `budget` and the capacity have room for it (no
    /// eviction). Its slot, or `None` when there is no room (the fill gives up).
    pub(crate) fn fill_entry(
        &mut self,
        key: &[u8],
        value: &[u8],
        prefix_len: usize,
        budget: &mut usize,
    ) -> Option<u32> {
        let plen = u16::try_from(prefix_len).ok()?;
        let i = match self.probe(key) {
            super::Found::Slot(i) => i,
            super::Found::Missing(hash) => {
                // What the entry's slot will cost (`Slot::bytes`: its buffers' heap bytes, not lengths).
                let bytes = Bytes::heap_bytes_extended(None, key.len())
                    + Bytes::heap_bytes_extended(None, value.len())
                    + ENTRY_OVERHEAD;
                if bytes > *budget || self.used + bytes > self.capacity || !self.table.make_room() {
                    return None;
                }
                *budget -= bytes;
                let i = self.insert_clean(hash, key, Some(value));
                // Read by the scan taking it in: CLOCK's next sweep passes it once, as a hit's entry, so
                // that the map's entries are not its first victims (one eviction drops the mark).
                self.slot_mut(i).referenced = true;
                i
            }
        };
        let s = self.slot_mut(i);
        match s.map_prefix {
            0 => s.map_prefix = plen,
            n if n == plen => {}
            // Written as an entry of a map with a prefix of another length: not this map's to list.
            _ => return None,
        }
        Some(i)
    }

    /// A fill of the map `prefix` gave up: it is not tried again for a while.
    pub(crate) fn fill_gave_up(&mut self, prefix: &[u8]) {
        self.marks.give_up(prefix);
    }

    /// Marks the map `prefix` complete with `slots`, the slots of its entries (the engine's, taken in by
    /// [`fill_entry`](Self::fill_entry), and its dirty ones), if the mark's bytes fit the capacity. Whether
    /// it is marked. `sorted`: `slots` are sorted by key without repeats (a scan reads them as they are).
    pub(crate) fn mark_complete(&mut self, prefix: &[u8], slots: &[u32], sorted: bool) -> bool {
        if self.marks.contains(prefix) {
            return true;
        }
        let bytes = super::map_marks::MARK_OVERHEAD + prefix.len() + 4 * slots.len();
        if slots.is_empty() || self.used + bytes > self.capacity || self.marks.other_width(prefix) {
            return false;
        }
        let before = self.marks.bytes;
        self.marks.insert(prefix, slots, sorted);
        self.used = self.used + self.marks.bytes - before;
        true
    }

    /// How many maps are marked complete.
    #[cfg(test)]
    pub(crate) fn complete_maps(&self) -> usize {
        self.marks.len()
    }

    /// Tests: every map prefix hashes alike from now on, in the dirty index and the marks (both empty).
    #[cfg(test)]
    pub(crate) fn set_all_alike_prefix_hashes(&mut self) {
        self.maps.set_all_alike();
        self.marks.keys.all_alike = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(c: &RmwCache, prefix: &[u8]) -> Vec<Vec<u8>> {
        c.complete_slots(prefix)
            .iter()
            .map(|&i| c.map_entry(i, prefix).0.to_vec())
            .collect()
    }

    /// A fill into a cache close to full stops before the capacity: the room an entry needs is what its
    /// slot costs (a key longer than the inline bytes costs its buffer's heap bytes, not its length).
    #[test]
    fn a_fill_counts_entries_as_their_slots_cost_and_stays_within_the_capacity() {
        let prefix = b"\0\0\x01\x07".as_slice();
        let key = |k: u8| [prefix, &[k; 16]].concat();
        let slot_bytes = Bytes::new(&key(0)).heap_bytes() + ENTRY_OVERHEAD;
        // Room for 3 slots and the lengths of a 4th, not for the 4th slot.
        let capacity = 3 * slot_bytes + key(0).len() + 1 + ENTRY_OVERHEAD;
        assert!(capacity < 4 * slot_bytes);
        let mut c = RmwCache::new(capacity, true);
        let mut budget = usize::MAX;
        let taken = (1..=8u8)
            .map_while(|k| c.fill_entry(&key(k), &[k], prefix.len(), &mut budget))
            .count();
        assert_eq!(taken, 3);
        assert!(c.used() <= capacity, "{} of {capacity}", c.used());
    }

    /// Once a state's marked maps are all unmarked, a map of another prefix width of the state can be
    /// marked.
    #[test]
    fn a_states_mark_width_is_free_again_once_its_marks_are_gone() {
        let mut c = RmwCache::new(1 << 20, true);
        let mut budget = usize::MAX;
        let mut mark = |c: &mut RmwCache, prefix: &[u8]| {
            let key = [prefix, &[1]].concat();
            let slots: Vec<u32> = c
                .fill_entry(&key, &[1], prefix.len(), &mut budget)
                .into_iter()
                .collect();
            c.mark_complete(prefix, &slots, true)
        };
        assert!(mark(&mut c, &[0, 0, 1, 7]));
        assert!(
            !mark(&mut c, &[0, 0, 2, 7, 0]),
            "another width while one is marked"
        );
        c.unmark_map(&[0, 0, 1, 7]);
        assert!(mark(&mut c, &[0, 0, 2, 7, 0]));
        assert!(c.is_map_complete(&[0, 0, 2, 7, 0]));
    }

    /// The marks' table is charged to the capacity as it grows, beside each mark's own bytes.
    #[test]
    fn the_marks_table_is_charged_to_the_capacity() {
        let mut c = RmwCache::new(1 << 20, true);
        let mut budget = usize::MAX;
        for m in 0..40u8 {
            let prefix = [0, 0, 1, m];
            let key = [&prefix[..], &[1]].concat();
            let slots: Vec<u32> = c
                .fill_entry(&key, &[1], 4, &mut budget)
                .into_iter()
                .collect();
            assert!(c.mark_complete(&prefix, &slots, true));
        }
        let table =
            c.marks.table_capacity() * (std::mem::size_of::<super::super::map_marks::Mark>() + 1);
        let marks = 40 * (super::super::map_marks::MARK_OVERHEAD + 4 + 4);
        assert!(
            c.marks.bytes >= table + marks,
            "{} < {table} + {marks}",
            c.marks.bytes
        );
        c.unmark_map(&[0, 0, 1, 3]);
        assert!(c.marks.bytes >= table + marks - 72);
    }

    /// A complete map's list stays sorted (no re-sort, no copy for the next batch of a scan) when a listed
    /// entry is written again, as TTL removals and re-stamps do while an iterator passes, and when a key
    /// after the last is added; a key before the last unsorts it until the next scan sorts it.
    #[test]
    fn rewrites_of_listed_entries_and_appends_keep_a_complete_maps_list_sorted() {
        let mut c = RmwCache::new(1 << 20, true);
        let prefix = b"\0\0\x01\x07".as_slice();
        let key = |k: u8| [prefix, &[k]].concat();
        let mut budget = usize::MAX;
        let slots: Vec<u32> = [1u8, 2, 3]
            .iter()
            .filter_map(|&k| c.fill_entry(&key(k), &[k], prefix.len(), &mut budget))
            .collect();
        assert!(c.mark_complete(prefix, &slots, false));
        assert!(c.sort_complete(prefix));
        let two = c.lookup(&key(2));
        c.write_map(two, &key(2), prefix.len(), None);
        c.write_map(None, &key(9), prefix.len(), Some(&[9]));
        let mark = c.marks.get(prefix).map(|m| (m.sorted, m.slots.len()));
        assert_eq!(
            mark,
            Some((true, 4)),
            "rewrite found in place, append kept order"
        );
        assert_eq!(keys(&c, prefix), [1u8, 2, 3, 9].map(key));
        c.write_map(None, &key(0), prefix.len(), Some(&[0]));
        assert_eq!(c.marks.get(prefix).map(|m| m.sorted), Some(false));
        assert!(c.sort_complete(prefix));
        assert_eq!(keys(&c, prefix), [0u8, 1, 2, 3, 9].map(key));
    }
}
