//! Appends that do not fit: a list append that would grow its cached entry past the capacity goes to the
//! engine with the entry, instead of pushing other entries out there (`design/rmw-cache.md`, "Growth into a
//! full cache").

use keyed_state_lsm::Db;

use super::{keyed_state_lsm_list_delimiter, Bytes, RmwCache};
use crate::error::Result;

impl RmwCache {
    /// Appends list `elements` to the entry of `key` in slot `i` in the engine rather than in the cache, and
    /// removes the entry, when the append would grow it past the capacity: a clean entry gets the elements
    /// as a merge operand (the engine holds its value), a dirty one is written whole with them (one put).
    /// An eviction would instead write back other entries, each dirty one an engine write of its own.
    /// `false`, nothing done, when the append fits, when the cache takes every key in at once (no
    /// doorkeeper: it evicts to make room), or when a pending layer may hold the key (that layer's value
    /// must reach the engine first). `buf`: scratch space for the joined value.
    pub(crate) fn append_around(
        &mut self,
        i: u32,
        key: &[u8],
        elements: &[u8],
        db: &Db,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        if self.door.is_empty() || !self.pending.is_empty() {
            return Ok(false);
        }
        let s = self.slot(i);
        let held = s.value.as_ref().map_or(0, Bytes::heap_bytes);
        let add = elements.len() + usize::from(s.value.is_some());
        let after = Bytes::heap_bytes_extended(s.value.as_ref(), add);
        if self.used - held + after <= self.capacity {
            return Ok(false);
        }
        if s.dirty {
            // No pending layer: its value is in the current log, which lets go of it below.
            buf.clear();
            if let Some(v) = &s.value {
                buf.extend_from_slice(v.as_slice());
                buf.push(keyed_state_lsm_list_delimiter());
            }
            buf.extend_from_slice(elements);
            db.put(key, buf)?;
            let log = s.log;
            if let Some(e) = self.log.get_mut(log as usize) {
                if e.valid && e.slot == i {
                    e.valid = false;
                    self.log_valid -= 1;
                }
            }
        } else {
            db.merge(key, elements)?;
        }
        self.remove_slot(i);
        if self.log_valid == 0 {
            self.log.clear();
        }
        Ok(true)
    }
}
