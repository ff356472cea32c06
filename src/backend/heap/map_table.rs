//! The map-state table of the heap backend: one hash lookup for `(key, namespace)`, then one small map.
//!
//! A [`MapTable`] holds the map states of one (state, key group). Its index is a hash table from the
//! key-and-namespace bytes (`K | [lenK] | NS | [lenNS]`, without the key-group prefix) to a [`UserMap`]: a
//! sorted vector of `(user key, value)` entries while the map is small, an ordered tree once it is large.
//! Empty maps are absent from the index.
//!
//! Copy-on-write is per *shard*: the index is split into a power-of-two number of shards by hash (about
//! [`SHARD_MAPS`] maps each; the count doubles as the table grows). A snapshot clones the table (two
//! reference counts); the first write to a shard while a snapshot holds it copies the shard directory
//! (one pointer per shard) and that shard (its maps; large maps are shared, not copied), never the whole key
//! group.
//!
//! Entries loaded by a restore arrive as whole entry keys, whose split into key-and-namespace and user key
//! the byte-level backend cannot know. They are kept in a sorted *run* (chunks of at most [`RUN_CHUNK`]
//! entries, copy-on-write per chunk) and moved into the index the first time an operation names their
//! key-and-namespace bytes. Ordered visits merge the index and the run.
//! `design/decisions/0002-heap-tables.md`, "Map state", records the layout and the measurements behind it.

use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::Arc;

use super::bytes::SmallBytes;
#[cfg(test)]
use super::map_run::RUN_CHUNK;
use super::map_run::{sort_prefix, Run, RunDir};
use super::user_map::Entry;
pub use super::user_map::UserMap;
use crate::error::Result;
use crate::ttl::TtlVerdict;

type FastHasher = foldhash::fast::RandomState;

/// Maps per index shard the table aims for: it doubles its shard count when it holds more maps than
/// `SHARD_MAPS × shards`.
pub const SHARD_MAPS: usize = 512;

/// One map in the index.
#[derive(Clone)]
struct Slot {
    /// Key and namespace bytes without the key-group prefix.
    key_ns: SmallBytes,
    map: UserMap,
}

/// One shard of the index.
#[derive(Clone, Default)]
struct Shard(hashbrown::HashTable<Slot>);

/// Where an incremental TTL cleanup pass over one [`MapTable`] stands: shards in index order, the maps of
/// a shard in the order they had when the pass entered it (maps added meanwhile are judged on the next
/// pass), the entries of a map in user-key order, then the restored entries not yet moved into the index,
/// in key order.
#[derive(Clone, Default)]
pub struct MapCursor {
    /// Index of the shard being walked.
    shard: usize,
    /// Whether `pending` holds the maps of `shard`.
    entered: bool,
    /// Key-and-namespace bytes of the shard's maps still to judge, the next one last.
    pending: Vec<SmallBytes>,
    /// The map being judged and the last user key judged in it.
    map: Option<(SmallBytes, Option<SmallBytes>)>,
    /// Whether the index is done and the run is being walked.
    in_run: bool,
    /// The last run key judged.
    run_last: Option<SmallBytes>,
}

/// The map states of one (state, key group); see the module documentation.
#[derive(Clone)]
pub struct MapTable {
    hasher: FastHasher,
    /// A power-of-two number of shards, chosen by hash bits 32.. (the bits hashbrown does not use for
    /// tables below 2^32 slots).
    shards: Arc<Vec<Arc<Shard>>>,
    maps: usize,
    /// Entries in the index (not counting the run).
    entries: usize,
    run: Run,
}

impl Default for MapTable {
    fn default() -> Self {
        MapTable {
            hasher: FastHasher::default(),
            shards: Arc::new(vec![Arc::new(Shard::default())]),
            maps: 0,
            entries: 0,
            run: Run::default(),
        }
    }
}

/// Which contents a [`MapTable`] had when [`MapTable::version`] was taken: its index and its restored run
/// are each behind an `Arc` that every change goes through with `Arc::make_mut` (as `table::KvVersion`).
pub struct MapVersion {
    shards: std::sync::Weak<Vec<Arc<Shard>>>,
    run: std::sync::Weak<RunDir>,
    len: usize,
}

impl MapTable {
    /// The table's current contents, for [`is_version`](Self::is_version) later.
    pub fn version(&self) -> MapVersion {
        MapVersion {
            shards: Arc::downgrade(&self.shards),
            run: Arc::downgrade(&self.run.dir),
            len: self.len(),
        }
    }

    /// Whether the table is unchanged since `v` was taken.
    pub fn is_version(&self, v: &MapVersion) -> bool {
        std::ptr::eq(v.shards.as_ptr(), Arc::as_ptr(&self.shards))
            && std::ptr::eq(v.run.as_ptr(), Arc::as_ptr(&self.run.dir))
            && v.len == self.len()
    }

    #[inline]
    fn hash(&self, key_ns: &[u8]) -> u64 {
        self.hasher.hash_one(key_ns)
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }

    /// Number of entries (user keys over all maps, restored ones included).
    pub fn len(&self) -> usize {
        self.entries + self.run.len
    }

    /// Whether the table holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of maps in the index (restored maps not yet touched are not counted).
    #[cfg(test)]
    pub fn maps(&self) -> usize {
        self.maps
    }

    /// Number of index shards.
    #[cfg(test)]
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The map of `key_ns`, read only. Restored entries not yet moved into the index are not seen: call
    /// [`adopt`](Self::adopt) first.
    #[inline]
    fn find(&self, key_ns: &[u8]) -> Option<&UserMap> {
        let h = self.hash(key_ns);
        self.shards[self.shard_of(h)]
            .0
            .find(h, |s| s.key_ns.as_slice() == key_ns)
            .map(|s| &s.map)
    }

    /// Moves the restored entries of `key_ns` into the index (nothing to do unless a restore left some).
    #[inline]
    fn adopt(&mut self, key_ns: &[u8]) {
        if self.run.len != 0 && (self.run.overlaps_index || self.find(key_ns).is_none()) {
            self.adopt_slow(key_ns);
        }
    }

    #[cold]
    fn adopt_slow(&mut self, key_ns: &[u8]) {
        let taken = self.run.take_prefix(key_ns);
        if taken.is_empty() {
            return;
        }
        if self.find(key_ns).is_none() {
            let n = taken.len();
            let entries = taken
                .into_iter()
                .map(|(k, v)| (SmallBytes::new(&k.as_slice()[key_ns.len()..]), v))
                .collect();
            self.insert_map(key_ns, UserMap::from_sorted(entries));
            self.entries += n;
            return;
        }
        // A restore into a table that already held this map: the loaded entries replace.
        for (k, v) in taken {
            self.put_inner(key_ns, &k.as_slice()[key_ns.len()..], v.as_slice());
        }
    }

    /// Adds a map for `key_ns`, which has none.
    fn insert_map(&mut self, key_ns: &[u8], map: UserMap) {
        let h = self.hash(key_ns);
        let s = self.shard_of(h);
        let hasher = &self.hasher;
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[s]);
        shard.0.insert_unique(
            h,
            Slot {
                key_ns: SmallBytes::new(key_ns),
                map,
            },
            |s| hasher.hash_one(s.key_ns.as_slice()),
        );
        self.maps += 1;
        if self.maps > SHARD_MAPS * self.shards.len() {
            self.grow();
        }
    }

    /// The value of `user_key` in the map of `key_ns`.
    #[inline]
    pub fn get(&mut self, key_ns: &[u8], user_key: &[u8]) -> Option<&SmallBytes> {
        self.adopt(key_ns);
        self.find(key_ns)?.get(user_key)
    }

    /// Inserts or replaces `user_key` in the map of `key_ns`.
    #[inline]
    pub fn put(&mut self, key_ns: &[u8], user_key: &[u8], value: &[u8]) {
        self.adopt(key_ns);
        self.put_inner(key_ns, user_key, value);
    }

    #[inline]
    fn put_inner(&mut self, key_ns: &[u8], user_key: &[u8], value: &[u8]) {
        let h = self.hash(key_ns);
        let s = self.shard_of(h);
        let hasher = &self.hasher;
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[s]);
        match shard.0.entry(
            h,
            |s| s.key_ns.as_slice() == key_ns,
            |s| hasher.hash_one(s.key_ns.as_slice()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                if e.get_mut().map.put(user_key, value) {
                    self.entries += 1;
                }
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(Slot {
                    key_ns: SmallBytes::new(key_ns),
                    map: UserMap::Small(vec![(SmallBytes::new(user_key), SmallBytes::new(value))]),
                });
                self.entries += 1;
                self.maps += 1;
                if self.maps > SHARD_MAPS * self.shards.len() {
                    self.grow();
                }
            }
        }
    }

    /// Removes `user_key` from the map of `key_ns` (and the map, once empty).
    pub fn remove(&mut self, key_ns: &[u8], user_key: &[u8]) {
        self.adopt(key_ns);
        if self.find(key_ns).is_none_or(|m| m.get(user_key).is_none()) {
            return;
        }
        let h = self.hash(key_ns);
        let s = self.shard_of(h);
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[s]);
        if let Ok(mut e) = shard.0.find_entry(h, |s| s.key_ns.as_slice() == key_ns) {
            if e.get_mut().map.remove(user_key) {
                self.entries -= 1;
            }
            if e.get().map.is_empty() {
                e.remove();
                self.maps -= 1;
            }
        }
    }

    /// Removes the map of `key_ns`.
    pub fn clear(&mut self, key_ns: &[u8]) {
        self.adopt(key_ns);
        if self.find(key_ns).is_none() {
            return;
        }
        let h = self.hash(key_ns);
        let s = self.shard_of(h);
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[s]);
        if let Ok(e) = shard.0.find_entry(h, |s| s.key_ns.as_slice() == key_ns) {
            let (slot, _) = e.remove();
            self.entries -= slot.map.len();
            self.maps -= 1;
        }
    }

    /// Visits the map of `key_ns` in ascending user-key order until `f` returns false.
    pub fn scan(&mut self, key_ns: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        self.adopt(key_ns);
        if let Some(m) = self.find(key_ns) {
            m.for_each(f);
        }
    }

    /// Visits the map of `key_ns` from user key `from` on, in ascending user-key order, until `f` returns
    /// false.
    pub fn scan_from(
        &mut self,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) {
        self.adopt(key_ns);
        if let Some(m) = self.find(key_ns) {
            m.for_each_from(Bound::Included(from), f);
        }
    }

    /// Incremental TTL cleanup: judges up to `n` entries from `cursor` on, removing the entries `judge`
    /// calls expired (and maps left empty) and rewriting the ones it replaces. Writes go through the
    /// copy-on-write rule, so an open snapshot keeps its entries; nothing is copied while every verdict is
    /// [`TtlVerdict::Keep`]. Returns how many entries were judged and whether the pass reached the end of
    /// the table (then `cursor` starts over).
    pub fn ttl_step(
        &mut self,
        cursor: &mut MapCursor,
        n: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> (usize, bool) {
        let mut judged = 0;
        while judged < n {
            if cursor.in_run {
                let want = n - judged;
                let (count, last) = self.run.ttl_step(
                    cursor.run_last.as_ref().map(SmallBytes::as_slice),
                    want,
                    judge,
                );
                judged += count;
                if count < want {
                    *cursor = MapCursor::default();
                    return (judged, true);
                }
                cursor.run_last = last;
                continue;
            }
            let Some((key_ns, after)) = cursor.map.as_mut() else {
                if !cursor.entered {
                    let Some(shard) = self.shards.get(cursor.shard) else {
                        cursor.in_run = true;
                        continue;
                    };
                    cursor.pending = shard.0.iter().map(|s| s.key_ns.clone()).collect();
                    cursor.pending.reverse();
                    cursor.entered = true;
                }
                match cursor.pending.pop() {
                    Some(key_ns) => cursor.map = Some((key_ns, None)),
                    None => {
                        cursor.shard += 1;
                        cursor.entered = false;
                    }
                }
                continue;
            };
            let (count, last) = self.ttl_step_map(
                key_ns.as_slice(),
                after.as_ref().map(SmallBytes::as_slice),
                n - judged,
                judge,
            );
            judged += count;
            match last {
                Some(last) => *after = Some(last),
                None => cursor.map = None,
            }
        }
        (judged, false)
    }

    /// Judges up to `want` entries of the map of `key_ns` with user keys above `after`. Returns how many
    /// were judged and, if the map has entries beyond them, the last user key judged.
    fn ttl_step_map(
        &mut self,
        key_ns: &[u8],
        after: Option<&[u8]>,
        want: usize,
        judge: &mut dyn FnMut(&[u8]) -> TtlVerdict,
    ) -> (usize, Option<SmallBytes>) {
        let h = self.hash(key_ns);
        let s = self.shard_of(h);
        let Some(slot) = self.shards[s].0.find(h, |x| x.key_ns.as_slice() == key_ns) else {
            return (0, None);
        };
        let mut batch: Vec<(SmallBytes, TtlVerdict)> = Vec::new();
        let mut more = false;
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        slot.map.for_each_from(lower, &mut |uk, v| {
            if batch.len() == want {
                more = true;
                return false;
            }
            batch.push((SmallBytes::new(uk), judge(v)));
            true
        });
        let judged = batch.len();
        let last = if more {
            batch.last().map(|(uk, _)| uk.clone())
        } else {
            None
        };
        if batch.iter().all(|(_, v)| *v == TtlVerdict::Keep) {
            return (judged, last);
        }
        let shard = Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[s]);
        if let Ok(mut e) = shard.0.find_entry(h, |x| x.key_ns.as_slice() == key_ns) {
            for (uk, verdict) in batch {
                match verdict {
                    TtlVerdict::Keep => {}
                    TtlVerdict::Remove => {
                        if e.get_mut().map.remove(uk.as_slice()) {
                            self.entries -= 1;
                        }
                    }
                    TtlVerdict::Replace(v) => {
                        e.get_mut().map.put(uk.as_slice(), &v);
                    }
                }
            }
            if e.get().map.is_empty() {
                e.remove();
                self.maps -= 1;
                return (judged, None);
            }
        }
        (judged, last)
    }

    /// Doubles the shard count, splitting each shard by the next hash bit.
    fn grow(&mut self) {
        let n = self.shards.len();
        let mut fresh: Vec<Shard> = (0..2 * n).map(|_| Shard::default()).collect();
        let old = std::mem::take(Arc::make_mut(&mut self.shards));
        for shard in old {
            let shard = Arc::unwrap_or_clone(shard);
            for slot in shard.0 {
                let h = self.hasher.hash_one(slot.key_ns.as_slice());
                let target = (h >> 32) as usize & (2 * n - 1);
                let hasher = &self.hasher;
                fresh[target]
                    .0
                    .insert_unique(h, slot, |s| hasher.hash_one(s.key_ns.as_slice()));
            }
        }
        self.shards = Arc::new(fresh.into_iter().map(Arc::new).collect());
    }

    /// Loads one restored entry: `key` is the whole entry key without its key-group prefix.
    pub fn load(&mut self, key: &[u8], value: &[u8]) {
        // A map in the index has no entries in the run (adoption moves them all at once) unless entries were
        // loaded while the index held maps: only then must a map found in the index still search the run.
        if self.maps != 0 {
            self.run.overlaps_index = true;
        }
        self.run.push(key, value);
    }

    /// Ends a restore: a run loaded out of order is sorted (the last load of a key wins), and maps the index
    /// already held take their loaded entries.
    pub fn finish_load(&mut self) {
        self.sort_run();
        if self.run.overlaps_index {
            // Entries were loaded while the index held maps: move those maps' entries over now (the
            // loaded ones replace), so that no map is in both places.
            let names: Vec<SmallBytes> = self
                .shards
                .iter()
                .flat_map(|s| s.0.iter().map(|slot| slot.key_ns.clone()))
                .collect();
            for key_ns in names {
                self.adopt_slow(key_ns.as_slice());
            }
            self.run.overlaps_index = false;
        }
    }

    /// Sorts a run loaded out of order (the last load of a key wins).
    fn sort_run(&mut self) {
        if !self.run.unsorted {
            return;
        }
        let mut all: Vec<Entry> = self.run.iter().cloned().collect();
        // Stable: among equal keys the load order stays, and the last one is kept.
        all.sort_by(|a, b| a.0.cmp(&b.0));
        let mut dedup: Vec<Entry> = Vec::with_capacity(all.len());
        for e in all {
            match dedup.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => dedup.push(e),
            }
        }
        let overlaps_index = self.run.overlaps_index;
        self.run = Run::from_sorted(&dedup);
        self.run.overlaps_index = overlaps_index;
    }

    /// Visits every entry in unspecified order until `f` returns false, with its whole key: `prefix`
    /// (the key-group prefix), then key and namespace, then user key.
    pub fn for_each(&self, prefix: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
        let mut key = prefix.to_vec();
        for shard in self.shards.iter() {
            for slot in shard.0.iter() {
                key.truncate(prefix.len());
                key.extend_from_slice(slot.key_ns.as_slice());
                let at = key.len();
                let go = slot.map.for_each(&mut |uk, v| {
                    key.truncate(at);
                    key.extend_from_slice(uk);
                    f(&key, v)
                });
                if !go {
                    return false;
                }
            }
        }
        for (k, v) in self.run.iter() {
            key.truncate(prefix.len());
            key.extend_from_slice(k.as_slice());
            if !f(&key, v.as_slice()) {
                return false;
            }
        }
        true
    }

    /// Visits every entry in ascending byte order of whole keys (`prefix | key and namespace | user key`);
    /// stops at the first error.
    ///
    /// Maps are sorted by their key-and-namespace bytes and emitted one after the other. That is entry-key
    /// order unless one map's key-and-namespace bytes are a prefix of another's (the typed store's keys are
    /// prefix-free, but the byte-level contract does not promise it): such a group of maps is merged by
    /// sorting its entries. Restored entries still in the run are merged in.
    pub fn for_each_sorted(
        &self,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut maps: Vec<(u128, &Slot)> = Vec::with_capacity(self.maps);
        for shard in self.shards.iter() {
            maps.extend(
                shard
                    .0
                    .iter()
                    .map(|s| (sort_prefix(s.key_ns.as_slice()), s)),
            );
        }
        maps.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.key_ns.as_slice().cmp(b.1.key_ns.as_slice()))
        });
        let mut run = self.run.iter().peekable();
        let mut key = prefix.to_vec();
        let p = prefix.len();
        // Emits one index entry (in `key`) after the run entries below it; an equal run entry (a restore
        // into a non-empty table) replaces it.
        let mut full = prefix.to_vec();
        let mut emit = |key: &mut Vec<u8>, value: &[u8]| -> Result<()> {
            let mut replaced = None;
            while let Some((rk, rv)) = run.peek() {
                match rk.as_slice().cmp(&key[p..]) {
                    std::cmp::Ordering::Less => {
                        full.truncate(p);
                        full.extend_from_slice(rk.as_slice());
                        f(&full, rv.as_slice())?;
                        run.next();
                    }
                    std::cmp::Ordering::Equal => {
                        replaced = Some(rv.as_slice());
                        run.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            f(key, replaced.unwrap_or(value))
        };
        let mut i = 0;
        while i < maps.len() {
            let head = maps[i].1.key_ns.as_slice();
            let mut j = i + 1;
            while j < maps.len() && maps[j].1.key_ns.as_slice().starts_with(head) {
                j += 1;
            }
            if j == i + 1 {
                key.truncate(p);
                key.extend_from_slice(head);
                let at = key.len();
                let mut result = Ok(());
                maps[i].1.map.for_each(&mut |uk, v| {
                    key.truncate(at);
                    key.extend_from_slice(uk);
                    result = emit(&mut key, v);
                    result.is_ok()
                });
                result?;
            } else {
                let mut group: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
                for (_, slot) in &maps[i..j] {
                    slot.map.for_each(&mut |uk, v| {
                        let mut k = slot.key_ns.as_slice().to_vec();
                        k.extend_from_slice(uk);
                        group.push((k, v.to_vec()));
                        true
                    });
                }
                // Two maps can still produce the same whole key (`a | bc` and `ab | c`): the stable sort
                // keeps the map with the shorter key-and-namespace first, and only that one is emitted.
                group.sort_by(|a, b| a.0.cmp(&b.0));
                group.dedup_by(|later, first| later.0 == first.0);
                for (k, v) in group {
                    key.truncate(p);
                    key.extend_from_slice(&k);
                    emit(&mut key, &v)?;
                }
            }
            i = j;
        }
        for (rk, rv) in run {
            key.truncate(p);
            key.extend_from_slice(rk.as_slice());
            f(&key, rv.as_slice())?;
        }
        Ok(())
    }

    /// Keeps the entries for which `f` returns true (`f` may change the value; it sees the key without the
    /// key-group prefix); empty maps are removed.
    pub fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut SmallBytes) -> bool) {
        let mut key = Vec::new();
        let (mut removed, mut maps_removed) = (0usize, 0usize);
        for shard in Arc::make_mut(&mut self.shards).iter_mut() {
            Arc::make_mut(shard).0.retain(|slot| {
                key.clear();
                key.extend_from_slice(slot.key_ns.as_slice());
                let at = key.len();
                removed += slot.map.retain(&mut |uk, v| {
                    key.truncate(at);
                    key.extend_from_slice(uk);
                    f(&key, v)
                });
                if slot.map.is_empty() {
                    maps_removed += 1;
                    false
                } else {
                    true
                }
            });
        }
        self.entries -= removed;
        self.maps -= maps_removed;
        if self.run.len != 0 {
            self.run.retain(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;

    /// Key-and-namespace bytes for map `i`: length-prefixed, so prefix-free as the typed store's are, and
    /// of varying length (`i` spreads over more maps than one shard holds).
    fn key_ns(i: u16) -> Vec<u8> {
        let len = (i % 3) as usize + 1;
        let mut k = vec![len as u8];
        k.extend_from_slice(&i.to_be_bytes()[2 - len.min(2)..]);
        k.resize(len + 1, 7);
        k
    }

    fn full(ns: &[u8], uk: &[u8]) -> Vec<u8> {
        let mut k = ns.to_vec();
        k.extend_from_slice(uk);
        k
    }

    /// The whole table in visit order (with a one-byte key-group prefix), checked against `model`.
    fn check(t: &MapTable, model: &Model) {
        let mut got = Vec::new();
        t.for_each_sorted(&[9], &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = model
            .iter()
            .map(|(k, v)| (full(&[9], k), v.clone()))
            .collect();
        assert_eq!(got, want, "sorted visit differs from the model");
        let mut unordered = Vec::new();
        t.for_each(&[9], &mut |k, v| {
            unordered.push((k.to_vec(), v.to_vec()));
            true
        });
        unordered.sort();
        assert_eq!(unordered, want, "unordered visit differs from the model");
        assert_eq!(t.len(), model.len());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16, Vec<u8>, Vec<u8>),
        Remove(u16, Vec<u8>),
        Get(u16, Vec<u8>),
        Scan(u16),
        Clear(u16),
        Snapshot,
        Release(usize),
        Retain,
        Cleanup(usize),
        Check,
    }

    /// The cleanup verdict of the tests: values starting with an even byte have expired, values starting
    /// with 1 are rewritten to `[3, 3]` (which stays).
    fn verdict(v: &[u8]) -> TtlVerdict {
        match v.first() {
            Some(b) if b % 2 == 0 => TtlVerdict::Remove,
            Some(1) => TtlVerdict::Replace(vec![3, 3]),
            _ => TtlVerdict::Keep,
        }
    }

    /// The whole table (without a key-group prefix) as a model.
    fn contents(t: &MapTable) -> Model {
        let mut got = Model::new();
        t.for_each_sorted(&[], &mut |k, v| {
            got.insert(k.to_vec(), v.to_vec());
            Ok(())
        })
        .unwrap();
        got
    }

    /// One cleanup step of at most `n` entries: every entry of the table is its model value or that value
    /// after its verdict, every missing entry was judged expired, and at most `n` entries changed. The
    /// model becomes the table.
    fn cleanup_step(t: &mut MapTable, cursor: &mut MapCursor, n: usize, model: &mut Model) -> bool {
        let (judged, finished) = t.ttl_step(cursor, n, &mut verdict);
        assert!(judged <= n, "judged {judged} of at most {n}");
        let got = contents(t);
        assert!(
            got.keys().all(|k| model.contains_key(k)),
            "cleanup added keys"
        );
        let mut changed = 0;
        for (k, v) in model.iter() {
            match (got.get(k), verdict(v)) {
                (Some(g), _) if g == v => {}
                (Some(g), TtlVerdict::Replace(r)) if *g == r => changed += 1,
                (None, TtlVerdict::Remove) => changed += 1,
                (g, want) => panic!("entry {k:?}: {v:?} became {g:?} under verdict {want:?}"),
            }
        }
        assert!(
            changed <= judged,
            "{changed} entries changed, {judged} judged"
        );
        assert_eq!(t.len(), got.len());
        *model = got;
        finished
    }

    fn user_key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(0u8..6, 0..3)
    }

    fn op(maps: u16) -> impl Strategy<Value = Op> {
        let value = prop::collection::vec(any::<u8>(), 0..20);
        prop_oneof![
            10 => (0..maps, user_key(), value).prop_map(|(m, k, v)| Op::Put(m, k, v)),
            3 => (0..maps, user_key()).prop_map(|(m, k)| Op::Remove(m, k)),
            3 => (0..maps, user_key()).prop_map(|(m, k)| Op::Get(m, k)),
            2 => (0..maps).prop_map(Op::Scan),
            1 => (0..maps).prop_map(Op::Clear),
            1 => Just(Op::Snapshot),
            1 => any::<usize>().prop_map(Op::Release),
            1 => Just(Op::Retain),
            2 => (1usize..40).prop_map(Op::Cleanup),
            1 => Just(Op::Check),
        ]
    }

    /// Restored entries (loaded in order or shuffled), then a sequence of map operations with snapshots
    /// taken and released in between: the live table and every open snapshot always equal their models.
    fn run(restored: Vec<(u16, Vec<u8>, Vec<u8>)>, shuffle: bool, ops: Vec<Op>) {
        let mut t = MapTable::default();
        let mut model = Model::new();
        for (m, uk, v) in &restored {
            model.insert(full(&key_ns(*m), uk), v.clone());
        }
        let mut load: Vec<(Vec<u8>, Vec<u8>)> =
            model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        if shuffle {
            load.reverse();
            // A duplicate loaded last wins.
            if let Some((k, _)) = load.first().cloned() {
                load.push((k.clone(), b"dup".to_vec()));
                model.insert(k, b"dup".to_vec());
            }
        }
        for (k, v) in &load {
            t.load(k, v);
        }
        t.finish_load();
        check(&t, &model);
        let mut snaps: Vec<(MapTable, Model)> = Vec::new();
        let mut cursor = MapCursor::default();
        for op in ops {
            match op {
                Op::Put(m, uk, v) => {
                    t.put(&key_ns(m), &uk, &v);
                    model.insert(full(&key_ns(m), &uk), v);
                }
                Op::Remove(m, uk) => {
                    t.remove(&key_ns(m), &uk);
                    model.remove(&full(&key_ns(m), &uk));
                }
                Op::Get(m, uk) => {
                    let got = t.get(&key_ns(m), &uk).map(|v| v.as_slice().to_vec());
                    assert_eq!(got.as_ref(), model.get(&full(&key_ns(m), &uk)));
                }
                Op::Scan(m) => {
                    let ns = key_ns(m);
                    let mut got = Vec::new();
                    t.scan(&ns, &mut |k, v| {
                        got.push((full(&ns, k), v.to_vec()));
                        true
                    });
                    let want: Vec<(Vec<u8>, Vec<u8>)> = model
                        .range(ns.clone()..)
                        .take_while(|(k, _)| k.starts_with(&ns))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(got, want);
                }
                Op::Clear(m) => {
                    let ns = key_ns(m);
                    t.clear(&ns);
                    model.retain(|k, _| !k.starts_with(&ns));
                }
                Op::Snapshot => snaps.push((t.clone(), model.clone())),
                Op::Release(i) => {
                    if !snaps.is_empty() {
                        let (s, m) = snaps.remove(i % snaps.len());
                        check(&s, &m);
                    }
                }
                Op::Retain => {
                    // Drop values starting with an even byte, rewrite those starting with 1.
                    let keep = |v: &[u8]| v.first().is_none_or(|b| b % 2 == 1);
                    t.retain(&mut |_, v| {
                        if !keep(v.as_slice()) {
                            return false;
                        }
                        if v.as_slice().first() == Some(&1) {
                            v.set(&[3, 3]);
                        }
                        true
                    });
                    model.retain(|_, v| keep(v));
                    for v in model.values_mut() {
                        if v.first() == Some(&1) {
                            *v = vec![3, 3];
                        }
                    }
                }
                Op::Cleanup(n) => {
                    cleanup_step(&mut t, &mut cursor, n, &mut model);
                }
                Op::Check => check(&t, &model),
            }
        }
        check(&t, &model);
        for (s, m) in &snaps {
            check(s, m);
        }
        // Two finished passes judge every entry the table held when the second began.
        let mut passes = 0;
        while passes < 2 {
            if cleanup_step(&mut t, &mut cursor, 7, &mut model) {
                passes += 1;
            }
        }
        assert!(model.values().all(|v| verdict(v) == TtlVerdict::Keep));
        check(&t, &model);
        for (s, m) in &snaps {
            check(s, m);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Few maps with many user keys each (small maps grow into trees and shrink back).
        #[test]
        fn few_large_maps_match_model(
            restored in prop::collection::vec((0u16..4, prop::collection::vec(0u8..8, 0..4), prop::collection::vec(any::<u8>(), 0..16)), 0..80),
            shuffle in any::<bool>(),
            ops in prop::collection::vec(op(4), 1..300),
        ) {
            run(restored, shuffle, ops);
        }

        /// Many maps (the index grows past one shard while snapshots are open).
        #[test]
        fn many_maps_match_model(
            restored in prop::collection::vec((0u16..1500, user_key(), prop::collection::vec(any::<u8>(), 0..16)), 0..400),
            shuffle in any::<bool>(),
            ops in prop::collection::vec(op(1500), 1..2500),
        ) {
            run(restored, shuffle, ops);
        }
    }

    /// A restore larger than several run chunks, with maps that straddle chunk boundaries, adopted in a
    /// scattered order while snapshots are open, in order and shuffled.
    #[test]
    fn multi_chunk_restore_adopts_in_any_order() {
        let mut restored = Vec::new();
        for m in 0..900u16 {
            for u in 0..(m % 13) as u8 {
                restored.push((m, vec![u, m as u8], vec![u; (m % 20) as usize]));
            }
        }
        assert!(restored.len() > 4 * RUN_CHUNK);
        let mut ops = Vec::new();
        for i in 0..900u16 {
            let m = ((i as u32 * 337) % 900) as u16;
            ops.push(Op::Get(m, vec![1, m as u8]));
            if i % 50 == 0 {
                ops.push(Op::Snapshot);
                ops.push(Op::Put(m + 1, vec![0, 0], vec![5]));
                ops.push(Op::Check);
            }
            if i % 70 == 0 {
                ops.push(Op::Release(i as usize));
                ops.push(Op::Scan((m + 7) % 900));
                ops.push(Op::Clear((m + 3) % 900));
            }
            if i == 450 {
                ops.push(Op::Retain);
            }
        }
        run(restored.clone(), false, ops.clone());
        run(restored, true, ops);
    }

    /// Cleanup passes over restored entries still in the run (none adopted yet), large maps shared with a
    /// snapshot, and maps emptied by the cleanup: the snapshot keeps every entry, the live table loses
    /// exactly the expired ones.
    #[test]
    fn cleanup_passes_over_run_trees_and_snapshots() {
        let mut t = MapTable::default();
        let mut model = Model::new();
        for m in 0..600u16 {
            for u in 0..(m % 7) as u8 {
                let k = full(&key_ns(m), &[u]);
                t.load(&k, &[u % 3, 9]);
                model.insert(k, vec![u % 3, 9]);
            }
        }
        t.finish_load();
        for u in 0..100u8 {
            t.put(b"big", &[u], &[u % 4]);
            model.insert(full(b"big", &[u]), vec![u % 4]);
        }
        for m in 600..700u16 {
            t.put(&key_ns(m), b"x", &[0]);
            model.insert(full(&key_ns(m), b"x"), vec![0]);
        }
        let snap = t.clone();
        let before = model.clone();
        let mut cursor = MapCursor::default();
        let mut steps = 0;
        while !cleanup_step(&mut t, &mut cursor, 13, &mut model) {
            steps += 1;
            assert!(steps < 10_000, "the pass does not end");
        }
        assert!(model.values().all(|v| verdict(v) == TtlVerdict::Keep));
        assert!(model.contains_key(&full(b"big", &[1])));
        assert!(!model.contains_key(&full(&key_ns(650), b"x")));
        check(&t, &model);
        check(&snap, &before);
        // Restored maps not cleaned are still adopted correctly.
        for m in 0..600u16 {
            for u in 0..(m % 7) as u8 {
                let want = model.get(&full(&key_ns(m), &[u])).cloned();
                let got = t.get(&key_ns(m), &[u]).map(|v| v.as_slice().to_vec());
                assert_eq!(got, want);
            }
        }
        check(&t, &model);
    }

    /// `scan_from` starts at the first user key `>= from`, in small maps, trees and restored maps.
    #[test]
    fn scan_from_starts_at_the_bound() {
        let mut t = MapTable::default();
        t.load(&full(b"r", &[2]), b"2");
        t.load(&full(b"r", &[4]), b"4");
        t.finish_load();
        for u in (0..80u8).step_by(2) {
            t.put(b"big", &[u], &[u]);
        }
        t.put(b"s", &[1], b"1");
        t.put(b"s", &[5], b"5");
        let scan = |t: &mut MapTable, ns: &[u8], from: &[u8]| {
            let mut got = Vec::new();
            t.scan_from(ns, from, &mut |k, _| {
                got.push(k.to_vec());
                true
            });
            got
        };
        assert_eq!(scan(&mut t, b"r", &[3]), vec![vec![4]]);
        assert_eq!(scan(&mut t, b"s", &[1]), vec![vec![1], vec![5]]);
        assert_eq!(scan(&mut t, b"s", &[2]), vec![vec![5]]);
        assert_eq!(scan(&mut t, b"s", &[6]), Vec::<Vec<u8>>::new());
        assert_eq!(scan(&mut t, b"big", &[75]), vec![vec![76], vec![78]]);
        assert_eq!(scan(&mut t, b"none", &[]), Vec::<Vec<u8>>::new());
    }

    /// Entries loaded into a table that already holds maps (outside the restore contract, still
    /// consistent): a loaded entry replaces the one in the index, in reads and visits alike.
    #[test]
    fn load_into_non_empty_table_replaces() {
        let mut t = MapTable::default();
        let mut model = Model::new();
        for m in 0..20u16 {
            t.put(&key_ns(m), b"a", b"old");
            model.insert(full(&key_ns(m), b"a"), b"old".to_vec());
        }
        // Out of order: the run is sorted first, and the index's maps still take their entries.
        for m in (0..20u16).step_by(3).rev() {
            for uk in [&b"a"[..], b"b"] {
                t.load(&full(&key_ns(m), uk), b"loaded");
                model.insert(full(&key_ns(m), uk), b"loaded".to_vec());
            }
        }
        t.finish_load();
        // Visits merge first (nothing adopted yet), then reads adopt.
        check(&t, &model);
        for m in 0..20u16 {
            for uk in [&b"a"[..], b"b"] {
                let got = t.get(&key_ns(m), uk).map(|v| v.as_slice().to_vec());
                assert_eq!(got.as_ref(), model.get(&full(&key_ns(m), uk)));
            }
        }
        check(&t, &model);
    }

    /// A user map past `SMALL_MAX` entries becomes a tree, shared with a snapshot until written, and turns
    /// back into a vector when it shrinks; the index grows its shard count.
    #[test]
    fn representations_and_growth() {
        let mut t = MapTable::default();
        for i in 0..100u8 {
            t.put(b"k", &[i], &[i]);
        }
        let snap = t.clone();
        assert!(matches!(t.find(b"k"), Some(UserMap::Large(_))));
        t.put(b"k", &[5], b"new");
        assert_eq!(
            snap.clone().get(b"k", &[5]).map(|v| v.as_slice()),
            Some(&[5u8][..])
        );
        for i in 0..95u8 {
            t.remove(b"k", &[i]);
        }
        assert!(matches!(t.find(b"k"), Some(UserMap::Small(_))));
        assert_eq!(t.len(), 5);
        for i in 0..(3 * SHARD_MAPS as u32) {
            t.put(&i.to_be_bytes(), b"u", b"v");
        }
        assert_eq!(t.maps(), 3 * SHARD_MAPS + 1);
        assert_eq!(t.shard_count(), 4);
        t.clear(b"k");
        assert_eq!(t.len(), 3 * SHARD_MAPS);
        assert_eq!(snap.len(), 100);
    }

    /// Key-and-namespace bytes that are prefixes of each other (not produced by the typed store, allowed by
    /// the byte-level contract) still visit in whole-key byte order, each whole key once.
    #[test]
    fn prefix_related_maps_visit_in_byte_order() {
        let mut t = MapTable::default();
        t.put(b"a", b"c", b"1");
        t.put(b"a", b"a", b"2");
        t.put(b"ab", b"", b"3");
        t.put(b"ab", b"d", b"4");
        t.put(b"a", b"bd", b"dup");
        t.put(b"b", b"", b"5");
        let mut got = Vec::new();
        t.for_each_sorted(&[], &mut |k, v| {
            got.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = [
            ("aa", "2"),
            ("ab", "3"),
            ("abd", "dup"),
            ("ac", "1"),
            ("b", "5"),
        ]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(got, want);
    }
}
