//! The dirty entries of one map, read from the cache's index of dirty map entries (`map_index`): as slot
//! numbers sorted by key, which a map scan merges with the engine's entries reading the slots in place, or
//! as copies ([`MapDirty`]) for a map clear, which writes the cache while it reads them.

use super::map_index::{WIDTH_MIXED, WIDTH_NONE};
use super::{map_prefix_of, MapDirty, RmwCache};

impl RmwCache {
    /// The slots of the dirty entries of the map `prefix` (`sid | KG | K | NS`), sorted by key, into `out`
    /// (cleared first): with the engine's entries under `prefix`, the map's current contents. Read them
    /// with [`map_entry`](Self::map_entry) until the cache changes. False when the index cannot tell:
    /// dirty map entries of the state were written under prefixes of another length, so keys under `prefix`
    /// may belong to another map's list (the caller writes everything back instead). Prunes the map's list
    /// of the entries that went clean or whose slot was reused; allocates nothing once `out` has grown.
    pub(crate) fn map_dirty_slots(&mut self, prefix: &[u8], out: &mut Vec<u32>) -> bool {
        out.clear();
        match self.maps.width(prefix) {
            WIDTH_NONE => return true,
            WIDTH_MIXED => return false,
            w if w != prefix.len() as u32 => return false,
            _ => {}
        }
        let key = self.maps.key(prefix);
        let keys = self.maps.keys();
        let Some(list) = self.maps.list_mut(key) else {
            return true;
        };
        let slots = &self.slots;
        let before = list.len();
        list.sort_unstable();
        list.dedup();
        // Kept: dirty entries of this map, and of maps whose prefixes hash alike (their list too); this
        // map's are collected as they are kept (one read of each slot).
        list.retain(|&i| match slots.get(i as usize) {
            Some(Some(s)) if s.dirty => match map_prefix_of(s) {
                Some(p) if p == prefix => {
                    out.push(i);
                    true
                }
                Some(p) => keys.key(p) == key,
                None => false,
            },
            _ => false,
        });
        let (removed, empty) = (before - list.len(), list.is_empty());
        self.maps.len -= removed;
        if empty {
            self.maps.remove(key);
        }
        // Slot order is mostly key order (a map's entries written in key order take ascending slots), which
        // the sort of a few entries checks in one pass.
        let slots = &self.slots;
        let key_of = |i: u32| match slots.get(i as usize) {
            Some(Some(s)) => s.key.as_slice(),
            _ => &[],
        };
        out.sort_unstable_by(|&a, &b| key_of(a).cmp(key_of(b)));
        true
    }

    /// The key and value (`None`: deleted or absent) of slot `i`, one of those
    /// [`map_dirty_slots`](Self::map_dirty_slots) or [`complete_slots`](Self::complete_slots) listed for the
    /// map `prefix` (with no cache change since: the slot is live and holds an entry of the map, which debug
    /// builds check).
    #[inline]
    pub(crate) fn map_entry(&self, i: u32, prefix: &[u8]) -> (&[u8], Option<&[u8]>) {
        match self.slots.get(i as usize) {
            Some(Some(s)) => {
                debug_assert!(
                    map_prefix_of(s) == Some(prefix),
                    "slot {i} no longer an entry of the map: the cache changed since it was listed"
                );
                (s.key.as_slice(), s.value.as_ref().map(|v| v.as_slice()))
            }
            _ => {
                debug_assert!(
                    false,
                    "slot {i} no longer live: the cache changed since it was listed"
                );
                (&[], None)
            }
        }
    }

    /// The dirty entries of the map `prefix`, sorted by key, copied ([`map_dirty_slots`](Self::map_dirty_slots));
    /// `None` when the index cannot tell.
    pub(crate) fn map_dirty(&mut self, prefix: &[u8]) -> Option<MapDirty> {
        let mut slots = Vec::new();
        if !self.map_dirty_slots(prefix, &mut slots) {
            return None;
        }
        Some(
            slots
                .iter()
                .filter_map(|&i| match self.slots.get(i as usize) {
                    Some(Some(s)) => Some((s.key.clone(), s.value.clone())),
                    _ => None,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entries written out of key order (slots in another order than their keys) and written again (listed
    /// twice) come out once each, sorted by key; entries that went clean are left out and pruned.
    #[test]
    fn a_maps_dirty_slots_are_listed_once_each_in_key_order_without_clean_ones() {
        let mut c = RmwCache::new(1 << 20, true);
        let p = b"sidKGKEY".as_slice();
        let key = |uk: u8| [p, &[uk; 12]].concat();
        for uk in [5u8, 1, 9, 3] {
            c.write_map(None, &key(uk), p.len(), Some(&[uk]));
        }
        let held = c.lookup(&key(9));
        c.write_map(held, &key(9), p.len(), None);
        // Slot of 3 written back (clean), then 3 listed no more.
        let three = c.lookup(&key(3));
        if let Some(Some(s)) = three.and_then(|i| c.slots.get_mut(i as usize)) {
            s.dirty = false;
        }
        let mut out = vec![42];
        assert!(c.map_dirty_slots(p, &mut out));
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = out
            .iter()
            .map(|&i| c.map_entry(i, p))
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(
            got,
            vec![
                (key(1), Some(vec![1])),
                (key(5), Some(vec![5])),
                (key(9), None),
            ]
        );
        assert_eq!(c.maps.len, 3, "the clean entry's listing is pruned");
        // Another map's prefix: nothing listed.
        assert!(c.map_dirty_slots(b"sidKGOTH", &mut out));
        assert!(out.is_empty());
    }
}
