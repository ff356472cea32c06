//! The read-modify-write cache's "map complete" marks: the maps (by exact prefix, `sid | KG | K | NS`)
//! whose every live entry the cache holds, each with the slots of its entries, so that a scan of such a
//! map reads the cache alone.

use super::map_index::Keys;

/// Bytes charged per mark beside its prefix and its slot list (4 bytes a listed slot): the allocation
/// headers and rounding of the two, about. The table's buckets are charged as the table grows
/// ([`MapMarks::bytes`]).
pub(super) const MARK_OVERHEAD: usize = 64;

/// What one bucket of the marks' table holds: a mark and its control byte.
const BUCKET_BYTES: usize = std::mem::size_of::<Mark>() + 1;

/// Prefix hashes of maps a fill gave up on that are remembered (then forgotten all at once).
const TRIED_MAX: usize = 4096;

/// One complete map.
pub(super) struct Mark {
    /// The map's prefix, compared whole: maps whose prefixes hash alike keep their own marks.
    pub(super) prefix: Box<[u8]>,
    /// Slots of the map's entries (values, dirty deletes, absent keys read): every entry of the map with a
    /// value is one of them. May list a slot twice until it is sorted.
    pub(super) slots: Vec<u32>,
    /// `slots` sorted by key without repeats.
    pub(super) sorted: bool,
}

impl Mark {
    fn bytes(&self) -> usize {
        MARK_OVERHEAD + self.prefix.len() + 4 * self.slots.capacity()
    }
}

/// The marks, and the maps a fill gave up on (too large, or no room), which are not filled again until
/// that list is forgotten (when it is full, or the cache is cleared).
#[derive(Default)]
pub(super) struct MapMarks {
    table: hashbrown::HashTable<Mark>,
    pub(super) keys: Keys,
    /// What the marks cost ([`Mark::bytes`]) and the table's buckets, charged to the cache's capacity.
    pub(super) bytes: usize,
    tried: hashbrown::HashSet<u64>,
    /// Per state id: the length of the prefixes of its marked maps (0: none marked since the marks were
    /// cleared). One per state: a map's scan sees the entries of longer maps its prefix is a prefix of
    /// (key serializers need not be prefix-free), which a mark of the shorter map would not follow.
    widths: Vec<u16>,
    /// Per state id: how many of its maps are marked (at 0 its width is free again).
    counts: Vec<u32>,
}

/// The state id of a map prefix.
fn sid(prefix: &[u8]) -> usize {
    prefix
        .get(..2)
        .map_or(0, |b| usize::from(u16::from_be_bytes([b[0], b[1]])))
}

impl MapMarks {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.table.len()
    }

    #[cfg(test)]
    pub(super) fn table_capacity(&self) -> usize {
        self.table.capacity()
    }

    pub(super) fn clear(&mut self) {
        // The table's memory goes too: its buckets are charged.
        self.table = hashbrown::HashTable::new();
        self.tried.clear();
        self.bytes = 0;
        self.widths.clear();
        self.counts.clear();
    }

    /// Whether maps of `prefix`'s state are marked with prefixes of another length than `prefix`'s (then
    /// `prefix`'s map is not marked, and a write of it clears the marks).
    #[inline]
    pub(super) fn other_width(&self, prefix: &[u8]) -> bool {
        match self.widths.get(sid(prefix)) {
            Some(&w) => w != 0 && usize::from(w) != prefix.len(),
            None => false,
        }
    }

    pub(super) fn contains(&self, prefix: &[u8]) -> bool {
        let h = self.keys.key(prefix);
        self.table.find(h, |m| &*m.prefix == prefix).is_some()
    }

    /// `prefix`'s mark.
    pub(super) fn get(&self, prefix: &[u8]) -> Option<&Mark> {
        let h = self.keys.key(prefix);
        self.table.find(h, |m| &*m.prefix == prefix)
    }

    /// `prefix`'s mark, to read or change its slots; the caller calls [`recount`](Self::recount) after a
    /// change of their number.
    pub(super) fn get_mut(&mut self, prefix: &[u8]) -> Option<&mut Mark> {
        let h = self.keys.key(prefix);
        self.table.find_mut(h, |m| &*m.prefix == prefix)
    }

    /// Adds the slot list's growth to the bytes, after a change of `prefix`'s mark that held `before`
    /// bytes.
    pub(super) fn recount(&mut self, prefix: &[u8], before: usize) {
        let after = self.get_mut(prefix).map_or(0, |m| m.bytes());
        self.bytes = self.bytes + after - before;
    }

    /// The bytes `prefix`'s mark holds (0: none).
    pub(super) fn bytes_of(&mut self, prefix: &[u8]) -> usize {
        self.get_mut(prefix).map_or(0, |m| m.bytes())
    }

    /// Marks the map `prefix` complete with the slots of its entries (it is not marked); `sorted`: they are
    /// sorted by key without repeats.
    pub(super) fn insert(&mut self, prefix: &[u8], slots: &[u32], sorted: bool) {
        let sid = sid(prefix);
        if self.widths.len() <= sid {
            self.widths.resize(sid + 1, 0);
            self.counts.resize(sid + 1, 0);
        }
        self.widths[sid] = u16::try_from(prefix.len()).unwrap_or(u16::MAX);
        self.counts[sid] += 1;
        let mark = Mark {
            prefix: prefix.into(),
            slots: slots.to_vec(),
            sorted,
        };
        self.bytes += mark.bytes();
        let h = self.keys.key(prefix);
        let keys = &self.keys;
        let buckets = self.table.capacity();
        self.table.insert_unique(h, mark, |m| keys.key(&m.prefix));
        self.bytes = self.bytes + BUCKET_BYTES * self.table.capacity() - BUCKET_BYTES * buckets;
    }

    /// Drops `prefix`'s mark, if any.
    pub(super) fn remove(&mut self, prefix: &[u8]) {
        let h = self.keys.key(prefix);
        if let Ok(e) = self.table.find_entry(h, |m| &*m.prefix == prefix) {
            let (m, _) = e.remove();
            self.bytes -= m.bytes();
            let sid = sid(prefix);
            if let Some(n) = self.counts.get_mut(sid) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    // No map of the state is marked: another width may be.
                    self.widths[sid] = 0;
                }
            }
        }
    }

    /// Whether a fill of `prefix` gave up lately.
    pub(super) fn tried(&self, prefix: &[u8]) -> bool {
        !self.tried.is_empty() && self.tried.contains(&self.keys.key(prefix))
    }

    /// Remembers that a fill of `prefix` gave up.
    pub(super) fn give_up(&mut self, prefix: &[u8]) {
        if self.tried.len() >= TRIED_MAX {
            self.tried.clear();
        }
        self.tried.insert(self.keys.key(prefix));
    }
}
