//! The cache's CLOCK eviction: choosing victims until the cache fits its capacity, writing the dirty ones
//! back to the engine, and removing them; first around the pending layers (victims no pending layer
//! holds), then after draining those layers.

use std::hash::BuildHasher;

use keyed_state_lsm::{Db, WriteBatch};

use super::RmwCache;
use crate::error::Result;

impl RmwCache {
    /// Evicts entries (CLOCK) until the cache fits its capacity, writing dirty ones back; slot `keep` (the
    /// entry the current operation returns) stays.
    #[inline]
    pub(crate) fn evict(&mut self, keep: Option<u32>, db: &Db) -> Result<()> {
        if self.used <= self.capacity {
            return Ok(());
        }
        self.evict_slow(keep, db)
    }

    #[cold]
    fn evict_slow(&mut self, keep: Option<u32>, db: &Db) -> Result<()> {
        if !self.pending.is_empty() {
            // Around the pending layers first: a victim that is clean, or dirty only in the current log and
            // in no pending layer, needs no drain, so a checkpoint capture of those layers still in flight
            // keeps its claim to be adopted (`design/rmw-cache.md`, "Adoption of a capture's files").
            self.evict_victims(keep, db, true)?;
            if self.used <= self.capacity {
                return Ok(());
            }
            // Pending values are older than anything written here; they go first.
            self.drain_pending(db)?;
        }
        self.evict_victims(keep, db, false)
    }

    /// Slots an eviction around the pending layers looks at before it gives up and drains them.
    const AROUND_PENDING_SCAN: usize = 4096;

    /// The CLOCK eviction: chooses victims, writes the dirty ones back, removes them. `around_pending`:
    /// only victims in no pending layer (clean, or dirty in the current epoch with a key no pending layer
    /// holds), looking at no more than [`AROUND_PENDING_SCAN`](Self::AROUND_PENDING_SCAN) slots; otherwise
    /// the pending layers must have been drained.
    fn evict_victims(&mut self, keep: Option<u32>, db: &Db, around_pending: bool) -> Result<()> {
        let pending_keys = if around_pending {
            let keys = match self.pending_keys.take() {
                Some(k) => k,
                None => {
                    let hasher = &self.hasher;
                    self.pending
                        .iter()
                        .flat_map(|l| l.entries.iter().filter(|e| e.valid))
                        .map(|e| hasher.hash_one(e.key.as_slice()))
                        .collect()
                }
            };
            Some(keys)
        } else {
            None
        };
        let r = self.evict_loop(keep, db, pending_keys.as_ref());
        if around_pending {
            self.pending_keys = pending_keys;
        }
        r
    }

    fn evict_loop(
        &mut self,
        keep: Option<u32>,
        db: &Db,
        pending_keys: Option<&hashbrown::HashSet<u64>>,
    ) -> Result<()> {
        let epoch = self.epoch;
        let mut budget = if pending_keys.is_some() {
            Self::AROUND_PENDING_SCAN
        } else {
            usize::MAX
        };
        let mut passes = 0usize;
        loop {
            // Choose victims (CLOCK), write the dirty ones back, and only then remove them: a failed write
            // leaves every victim in the cache, dirty, with its log entry.
            let mut victims: Vec<u32> = Vec::new();
            let mut batch = WriteBatch::new();
            let mut freeing = 0usize;
            while self.used - freeing > self.capacity
                && self.table.len() - victims.len() > usize::from(keep.is_some())
            {
                if self.hand >= self.slots.len() {
                    if !victims.is_empty() {
                        // These go before the hand can pass them again.
                        break;
                    }
                    self.hand = 0;
                    passes += 1;
                    if passes > 3 {
                        break;
                    }
                }
                if budget == 0 {
                    break;
                }
                budget -= 1;
                let i = self.hand as u32;
                self.hand += 1;
                if Some(i) == keep {
                    continue;
                }
                let Some(Some(s)) = self.slots.get_mut(i as usize) else {
                    continue;
                };
                if s.referenced {
                    s.referenced = false;
                    continue;
                }
                if let Some(keys) = pending_keys {
                    if s.dirty && (s.epoch != epoch || keys.contains(&s.hash)) {
                        // In a pending layer: written back only after that layer.
                        continue;
                    }
                }
                if s.dirty {
                    // Not in a pending layer (drained, or checked above): its value is in the current log.
                    match &s.value {
                        Some(v) => batch.put(s.key.as_slice(), v.as_slice()),
                        None => batch.delete(s.key.as_slice()),
                    };
                }
                freeing += s.bytes();
                victims.push(i);
            }
            if victims.is_empty() {
                break;
            }
            if !batch.is_empty() {
                db.write(&batch)?;
            }
            for &i in &victims {
                let log = match self.slots.get(i as usize) {
                    Some(Some(s)) if s.dirty => Some(s.log),
                    _ => None,
                };
                if let Some(e) = log.and_then(|l| self.log.get_mut(l as usize)) {
                    e.valid = false;
                    self.log_valid -= 1;
                }
                self.remove_slot(i);
            }
            if self.used <= self.capacity || passes > 3 {
                break;
            }
        }
        if self.log_valid == 0 {
            self.log.clear();
        }
        Ok(())
    }
}
