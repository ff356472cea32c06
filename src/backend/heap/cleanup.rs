//! Incremental TTL cleanup of the heap backend (Flink's `cleanupIncrementally`): a cursor per state walks its
//! tables key group by key group, a few entries per state access, removing or rewriting expired values.
//!
//! Hash tables have no order to resume from, so the cursor takes the keys of one key group's table when it
//! enters it and judges them a few at a time (entries added meanwhile are judged on the next round). Map
//! tables keep their own cursor ([`MapCursor`]: shard by shard, map by map, then restored entries); timer
//! tables resume after the last key judged.

use super::map_table::{MapCursor, MapTable};
use super::table::{CowTable, KvTable};
use super::timer_table::TimerTable;
use crate::ttl::TtlVerdict;

/// Where the incremental cleanup of one state stands.
#[derive(Default, Clone)]
pub(crate) struct CleanupCursor {
    /// Index of the key group (table) being cleaned.
    group: usize,
    /// Hash tables: keys of the current table still to judge.
    pending: Vec<Vec<u8>>,
    /// Whether `pending` was filled for `group`.
    entered: bool,
    /// Timer tables: the last key judged in the current table.
    last: Option<Vec<u8>>,
    /// Map tables: where the pass over the current table stands.
    map: MapCursor,
}

impl CleanupCursor {
    fn next_group(&mut self, groups: usize) {
        self.group = if groups == 0 {
            0
        } else {
            (self.group + 1) % groups
        };
        self.pending.clear();
        self.entered = false;
        self.last = None;
        self.map = MapCursor::default();
    }

    /// Judges up to `n` entries of hash tables `groups`; returns how many were judged.
    pub(crate) fn step_kv(
        &mut self,
        groups: &mut [CowTable],
        n: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> usize {
        let mut judged = 0;
        // At most one full round over the key groups per step, so an empty state costs O(key groups).
        let mut visited = 0;
        while judged < n && visited <= groups.len() {
            let Some(t) = groups.get_mut(self.group) else {
                self.next_group(groups.len());
                visited += 1;
                continue;
            };
            if !self.entered {
                self.entered = true;
                let mut keys = Vec::with_capacity(t.len());
                t.for_each(&mut |k, _| {
                    keys.push(k.to_vec());
                    true
                });
                keys.reverse();
                self.pending = keys;
            }
            let Some(key) = self.pending.pop() else {
                self.next_group(groups.len());
                visited += 1;
                continue;
            };
            judged += 1;
            let verdict = match t.get(&key) {
                Some(v) => judge(v),
                None => TtlVerdict::Keep,
            };
            match verdict {
                TtlVerdict::Keep => {}
                TtlVerdict::Remove => {
                    t.remove(&key);
                }
                TtlVerdict::Replace(v) => t.put(&key, &v),
            }
        }
        judged
    }

    /// Judges up to `n` entries of map tables `groups`; returns how many were judged.
    pub(crate) fn step_maps(
        &mut self,
        groups: &mut [MapTable],
        n: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> usize {
        let mut judged = 0;
        // At most one full round over the key groups per step, as for hash tables.
        let mut visited = 0;
        while judged < n && visited <= groups.len() {
            let Some(t) = groups.get_mut(self.group) else {
                self.next_group(groups.len());
                visited += 1;
                continue;
            };
            let (count, finished) = t.ttl_step(&mut self.map, n - judged, judge);
            judged += count;
            if finished {
                self.next_group(groups.len());
                visited += 1;
            }
        }
        judged
    }

    /// Judges up to `n` entries of timer tables `groups`; returns how many were judged.
    pub(crate) fn step_timers(
        &mut self,
        groups: &mut [TimerTable],
        n: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> usize {
        let mut judged = 0;
        let mut visited = 0;
        while judged < n && visited <= groups.len() {
            let Some(t) = groups.get_mut(self.group) else {
                self.next_group(groups.len());
                visited += 1;
                continue;
            };
            let from = self.last.clone().unwrap_or_default();
            let skip_first = self.last.is_some();
            let mut batch: Vec<(Vec<u8>, TtlVerdict)> = Vec::new();
            let want = n - judged;
            t.scan_from(&from, &mut |k, v| {
                if skip_first && k == from.as_slice() {
                    return true;
                }
                batch.push((k.to_vec(), judge(v)));
                batch.len() < want
            });
            if batch.is_empty() {
                self.next_group(groups.len());
                visited += 1;
                continue;
            }
            judged += batch.len();
            for (k, verdict) in batch {
                match verdict {
                    TtlVerdict::Keep => {}
                    TtlVerdict::Remove => {
                        t.remove(&k);
                    }
                    TtlVerdict::Replace(v) => t.insert(&k, &v),
                }
                self.last = Some(k);
            }
        }
        judged
    }
}
