//! Scans of one map of the LSM backend: a map the cache holds whole read from the cache alone (taken in
//! whole by the scan that finds it is not, when it fits), else the cache's dirty entries of the map merged
//! with the engine's iterators.

use super::cached::merged_scan;
use super::{prefix_bounds, LsmBackend, StateId};
use crate::error::Result;
use crate::meta::StateKind;

/// The most slots `map_slots` keeps between scans (4 bytes each); a scan of a larger map frees the rest.
const KEPT_MAP_SLOTS: usize = 64 << 10;

impl LsmBackend {
    /// With the cache on and `state` not a timer queue: whether the map whose prefix the key buffer holds
    /// (`sid | KG | K | NS`) has dirty entries for a scan to merge with the engine's; they are then listed
    /// in `map_slots` (sorted by key; see [`RmwCache::map_dirty_slots`]). False when there are none to merge
    /// (no cache, a timer queue, or nothing dirty in the map). When the cache cannot list them, everything
    /// is written back first and false returned. Private: only [`merged_map_scan`](Self::merged_map_scan)
    /// reads the list, right after it is made (the slots are valid only until the cache changes).
    ///
    /// [`RmwCache::map_dirty_slots`]: crate::backend::lsm_cache::RmwCache::map_dirty_slots
    fn map_dirty(&mut self, state: StateId) -> Result<bool> {
        if self.states[state].kind == StateKind::Timers {
            return Ok(false);
        }
        let Some(cache) = &mut self.cache else {
            return Ok(false);
        };
        if cache.map_dirty_slots(&self.kbuf, &mut self.map_slots) {
            return Ok(!self.map_slots.is_empty());
        }
        self.write_back()?;
        Ok(false)
    }

    /// When the cache holds the map whose prefix the key buffer holds whole (taken in first when `fill`:
    /// [`complete_map`](Self::complete_map)): visits its entries from user key `from` on from the cache
    /// alone, and returns true. Otherwise, when the map has dirty entries in the cache (see
    /// [`map_dirty`](Self::map_dirty)): visits its entries from `from` on, those dirty entries merged with
    /// the engine's, read in place (nothing copied, nothing written back), and returns true. False, having
    /// visited nothing, when there are none to merge: the caller scans the engine. No engine iterator when
    /// the engine cannot hold a key of the map ([`Db::prefix_iter`](keyed_state_lsm::Db::prefix_iter)).
    pub(super) fn merged_map_scan(
        &mut self,
        state: StateId,
        from: &[u8],
        fill: bool,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool> {
        if self.complete_map(state, fill)? {
            let Some(cache) = &self.cache else {
                return Ok(false);
            };
            let prefix = self.kbuf.as_slice();
            let skip = prefix.len();
            let slots = cache.complete_slots(prefix);
            return merged_scan(None, cache, slots, prefix, from, &mut |k, v| {
                f(&k[skip..], v)
            })
            .map(|()| true);
        }
        if !self.map_dirty(state)? {
            return Ok(false);
        }
        let Some(cache) = &self.cache else {
            return Ok(false);
        };
        let prefix = self.kbuf.as_slice();
        let it = self.shared.db.prefix_iter(prefix, from).map(|mut it| {
            it.seek_to_first();
            it
        });
        let skip = prefix.len();
        let res = merged_scan(it, cache, &self.map_slots, prefix, from, &mut |k, v| {
            f(&k[skip..], v)
        });
        if self.map_slots.capacity() > KEPT_MAP_SLOTS {
            self.map_slots = Vec::new();
        }
        res.map(|()| true)
    }

    /// With the cache on and `state` not a timer queue: whether the map whose prefix the key buffer holds is
    /// whole in the cache, its slots then sorted by key ([`RmwCache::sort_complete`]; read them in place with
    /// [`RmwCache::complete_slots`]). With `fill`, a map that is not is taken in first: the engine's entries of the map are inserted
    /// as clean entries (with its dirty ones, the whole map) while the cache has room and the fill's budget
    /// (a fraction of the capacity) lasts, and the map marked whole; a fill that gives up leaves what it
    /// took in, unmarked, and is not tried again for the map for a while.
    ///
    /// [`RmwCache::sort_complete`]: crate::backend::lsm_cache::RmwCache::sort_complete
    /// [`RmwCache::complete_slots`]: crate::backend::lsm_cache::RmwCache::complete_slots
    fn complete_map(&mut self, state: StateId, fill: bool) -> Result<bool> {
        if self.states[state].kind == StateKind::Timers {
            return Ok(false);
        }
        let Some(cache) = &mut self.cache else {
            return Ok(false);
        };
        let prefix = self.kbuf.as_slice();
        if cache.sort_complete(prefix) {
            return Ok(true);
        }
        if !fill || !cache.may_fill(prefix) {
            return Ok(false);
        }
        // The map's dirty entries (values and deletes), then the engine's others.
        if !cache.map_dirty_slots(prefix, &mut self.map_slots) {
            return Ok(false);
        }
        let dirty = self.map_slots.len();
        let mut budget = cache.fill_budget();
        if let Some(mut it) = self.shared.db.prefix_iter(prefix, &[]) {
            it.seek_to_first();
            while it.valid() {
                match cache.fill_entry(it.key(), it.value(), prefix.len(), &mut budget) {
                    Some(i) => self.map_slots.push(i),
                    None => {
                        cache.fill_gave_up(prefix);
                        return Ok(false);
                    }
                }
                it.next();
            }
            it.take_status()?;
        }
        // Two runs sorted by key (the dirty entries, the engine's): the list is sorted, without repeats,
        // when either is empty, and the first scan reads it as it is.
        let sorted = dirty == 0 || dirty == self.map_slots.len();
        let marked = cache.mark_complete(prefix, &self.map_slots, sorted);
        if self.map_slots.capacity() > KEPT_MAP_SLOTS {
            self.map_slots = Vec::new();
        }
        if !marked {
            cache.fill_gave_up(prefix);
            return Ok(false);
        }
        Ok(cache.sort_complete(prefix))
    }

    /// Whether the map whose prefix the key buffer holds is empty, when the cache holds it whole (`None`:
    /// it does not, the caller asks the engine).
    pub(super) fn complete_map_is_empty(&mut self, state: StateId) -> Option<bool> {
        if !self.complete_map(state, false).ok()? {
            return None;
        }
        let cache = self.cache.as_ref()?;
        let prefix = self.kbuf.as_slice();
        Some(
            cache
                .complete_slots(prefix)
                .iter()
                .all(|&i| cache.map_entry(i, prefix).1.is_none()),
        )
    }

    /// Visits every engine entry whose key starts with `prefix`, until `f` returns false.
    pub(super) fn scan_prefix(
        &self,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let mut it = self.shared.db.iter(prefix_bounds(prefix));
        it.seek_to_first();
        while it.valid() {
            if !f(it.key(), it.value()) {
                return Ok(());
            }
            it.next();
        }
        Ok(it.take_status()?)
    }
}
