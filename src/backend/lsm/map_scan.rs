//! Scans of one map of the LSM backend: the cache's dirty entries of the map and the engine's iterators.

use super::{bounds, prefix_bounds, LsmBackend, StateId};
use crate::backend::lsm_cache::MapDirty;
use crate::error::Result;
use crate::meta::StateKind;
use keyed_state_lsm::prefix_successor;

impl LsmBackend {
    /// With the cache on and `state` not a timer queue: the dirty entries of the map whose prefix the key
    /// buffer holds (`sid | KG | K | NS`), for a scan to merge with the engine's; `None` when there are none
    /// to merge (no cache, a timer queue, or nothing dirty in the map). When the cache cannot list them (see
    /// [`RmwCache::map_dirty`]), everything is written back first and `None` returned.
    pub(super) fn map_dirty(&mut self, state: StateId) -> Result<Option<MapDirty>> {
        if self.states[state].kind == StateKind::Timers {
            return Ok(None);
        }
        let Some(cache) = &mut self.cache else {
            return Ok(None);
        };
        match cache.map_dirty(&self.kbuf) {
            Some(d) if d.is_empty() => Ok(None),
            Some(d) => Ok(Some(d)),
            None => {
                self.write_back()?;
                Ok(None)
            }
        }
    }

    /// An engine iterator over the map `prefix`, positioned on its first key `>= prefix | from`.
    pub(super) fn map_iter(&self, prefix: &[u8], from: &[u8]) -> keyed_state_lsm::DbIter {
        let lower = [prefix, from].concat();
        let mut it = self
            .shared
            .db
            .iter(bounds(None, lower, prefix_successor(prefix)));
        it.seek_to_first();
        it
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
