//! Scans of one map of the LSM backend: the cache's dirty entries of the map and the engine's iterators.

use super::cached::merged_scan;
use super::{prefix_bounds, LsmBackend, StateId};
use crate::error::Result;
use crate::meta::StateKind;

impl LsmBackend {
    /// With the cache on and `state` not a timer queue: whether the map whose prefix the key buffer holds
    /// (`sid | KG | K | NS`) has dirty entries for a scan to merge with the engine's; they are then listed
    /// in `map_slots` (sorted by key; see [`RmwCache::map_dirty_slots`]). False when there are none to merge
    /// (no cache, a timer queue, or nothing dirty in the map). When the cache cannot list them, everything
    /// is written back first and false returned.
    ///
    /// [`RmwCache::map_dirty_slots`]: crate::backend::lsm_cache::RmwCache::map_dirty_slots
    pub(super) fn map_dirty(&mut self, state: StateId) -> Result<bool> {
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

    /// Visits the entries of the map whose prefix the key buffer holds from user key `from` on, after
    /// [`map_dirty`](Self::map_dirty) listed its dirty entries: those merged with the engine's, read in
    /// place (nothing copied, nothing written back). No engine iterator when the engine cannot hold a key
    /// of the map ([`Db::prefix_iter`](keyed_state_lsm::Db::prefix_iter)): a map whose entries are all
    /// dirty in the cache is read from the cache alone.
    pub(super) fn merged_map_scan(
        &self,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let prefix = self.kbuf.as_slice();
        let it = self.shared.db.prefix_iter(prefix, from).map(|mut it| {
            it.seek_to_first();
            it
        });
        let skip = prefix.len();
        merged_scan(it, cache, &self.map_slots, skip, from, &mut |k, v| {
            f(&k[skip..], v)
        })
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
