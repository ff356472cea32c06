//! The LSM backend: every state primitive on one instance of our LSM engine (`crate::lsm`).
//!
//! Engine key = `state id (u16 BE) | entry key`, where the entry key is Flink's working-state key
//! `KG | K | [lenK] | NS | [lenNS] | [UK]` (`crate::layout`). One engine holds every state; the two-byte state
//! prefix plays the role of RocksDB's column families (`design/lsm-backend.md` has the measurement behind
//! the choice). Because the prefix has a fixed width, an entry key is the suffix `&engine_key[2..]`, handed to
//! the savepoint encoder without a copy.
//!
//! * Map states store one engine entry per user key, so a map is the key range `sid | KG | K | NS`; touching
//!   one map entry never reads or writes the others.
//! * List `append` writes a merge operand (joined with `0x2C` as the engine's [`ListAppendOperator`](keyed_state_lsm::ListAppendOperator) does)
//!   and never reads the list; so does `merge_value` for reducing and aggregating states whose fold the
//!   store installed (`lsm_merge`, `design/merge-operands.md`).
//! * A snapshot pins an engine [`Snapshot`](keyed_state_lsm::Snapshot) (a registered sequence number: compaction keeps every version it
//!   can read); the asynchronous part iterates `[sid | KG, sid | KG+1)` at that sequence number, one key
//!   group at a time, handing values straight out of the memory-mapped SST blocks.
//! * A restore buffers the sorted runs it is given per state and hands them to a loader thread that
//!   bulk-loads them with [`Db::ingest_sorted_runs`] while the restore decodes on (SST files written
//!   directly, placed in the last level when nothing overlaps; see `lsm_load`).
//! * [`LsmBackend::clip_to`] deletes every key group outside a range with range tombstones (the engine drops
//!   whole files inside them), for rescaling from a checkpoint ([`LsmBackend::checkpoint`],
//!   [`LsmBackend::open_checkpoint`]).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::Mutex;

mod cache_config;
mod cache_share;
mod cache_stats;
mod cache_step;
mod cached;
mod capture;
mod clip;
mod engine;
mod keys;
mod map_scan;
mod open;
mod snapshot;

pub use crate::backend::lsm_cache::RmwCacheStepping;
pub(crate) use cache_share::{
    charged_on as rmw_caches_charged_on, set_ratio as set_rmw_cache_ratio,
};
pub use cache_share::{DEFAULT_RMW_CACHE_RATIO, SUGGESTED_RMW_CACHE_RATIO};
use cached::{
    cached_append, cached_map_put_all, cached_map_read, cached_map_write, cached_read,
    cached_write, settle,
};
use capture::LsmCapture;
pub use engine::LsmEngine;
use engine::Shared;
pub use keys::STATE_PREFIX_LEN;
use keys::{bounds, kg_prefix, prefix_bounds};
pub use snapshot::LsmSnapshot;

use super::lsm_cache::RmwCache;
use super::lsm_load::{LoadRun, Loader};
use super::{BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Location, Result};
use crate::keygroup::{read_key_group_prefix, write_key_group_prefix, KeyGroup};
use crate::meta::{StateKind, StateMetaInfo};
use keyed_state_lsm::{prefix_successor, CheckpointInfo, Db, ReadOptions, WriteBatch};

/// Restore buffers are handed to the loader thread once they hold this many bytes of keys and values (over
/// all states); with one batch queued and one being ingested, a restore buffers at most three times this.
const LOAD_BUFFER_BYTES: usize = 16 << 20;

/// Writes of `transform_values` and `map_clear` are batched this many at a time.
const BATCH_OPS: usize = 4096;

/// The LSM backend. See the module documentation.
pub struct LsmBackend {
    config: BackendConfig,
    prefix_len: usize,
    states: Vec<StateMetaInfo>,
    shared: Arc<Shared>,
    /// Reusable engine-key buffer.
    kbuf: Vec<u8>,
    /// The value returned by the last `get` / `map_get` (borrowed by the caller until the next call);
    /// reused, so a read allocates nothing once it has grown.
    vbuf: Vec<u8>,
    /// Restore buffers per state id.
    load: Vec<LoadRun>,
    load_bytes: usize,
    /// Ingests full restore buffers while the restore goes on.
    loader: Loader,
    /// Bytes buffered before a hand-over to the loader ([`LOAD_BUFFER_BYTES`]; tests make it small).
    load_buffer_bytes: usize,
    /// The read-modify-write cache (`design/rmw-cache.md`); `None` when its capacity is 0.
    cache: Option<RmwCache>,
    /// The cache's charge on the engine environment's memory budget: its capacity and its doorkeeper.
    cache_charge: Option<cache_share::CacheCharge>,
    /// With the default capacity on a budgeted environment: this backend's part of the budget's share for
    /// caches, followed as backends open and close (`cache_share`).
    share: Option<cache_share::ShareMember>,
    /// Whether a cache made for this backend takes keys in on their first miss
    /// ([`set_rmw_cache_admission`](Self::set_rmw_cache_admission)).
    cache_first_touch: bool,
    /// When a cache made for this backend steps aside ([`set_rmw_cache_stepping`](Self::set_rmw_cache_stepping)).
    cache_stepping: RmwCacheStepping,
    /// Reusable list of a map's dirty slots, filled and read only within one `merged_map_scan` (slots are
    /// valid until the cache changes); at most 64 Ki slots kept between scans.
    map_slots: Vec<u32>,
}

impl LsmBackend {
    /// The engine alone, for statistics, flushes and compactions: what it reads is what reached the engine,
    /// not the entries the read-modify-write cache holds dirty ([`write_back`](Self::write_back) first).
    pub fn db(&self) -> &Db {
        &self.shared.db
    }

    /// A shared handle on the engine that stays valid (and keeps the engine open) after this backend is
    /// moved into a store: for flushes, compactions, waiting and statistics from outside the store. It does
    /// not read state: the read-modify-write cache holds writes the engine has not seen, so
    /// [`LsmEngine::checkpoint`] refuses while it may hold any (take checkpoints through
    /// [`checkpoint`](Self::checkpoint) or the store, or [`write_back`](StateBackend::write_back) first).
    pub fn engine(&self) -> LsmEngine {
        LsmEngine(Arc::clone(&self.shared))
    }

    /// The engine's directory.
    pub fn path(&self) -> &Path {
        self.shared.db.path()
    }

    /// Writes the cache's dirty entries back, then flushes and hard-links the engine's files into `dir`
    /// (see [`Db::checkpoint`]). Together with [`states`](StateBackend::states) it is everything
    /// [`open_checkpoint`](Self::open_checkpoint) needs.
    pub fn checkpoint(&mut self, dir: impl AsRef<Path>) -> Result<CheckpointInfo> {
        self.write_back()?;
        Ok(self.shared.db.checkpoint(dir)?)
    }

    #[inline]
    fn check(&self, state: StateId, kg: KeyGroup, map: bool, op: &'static str) -> Result<()> {
        super::check_access(
            &self.states,
            self.config.key_group_range,
            state,
            kg,
            map,
            op,
        )
    }

    /// Whether `state`'s entries go through the read-modify-write cache: timer queues are read by ordered
    /// scans on every poll, so they bypass it.
    #[inline]
    fn cached_kind(&self, state: StateId) -> bool {
        !matches!(
            self.states.get(state).map(|m| m.kind),
            Some(StateKind::Timers)
        )
    }

    /// Builds `sid | parts...` into the key buffer.
    #[inline]
    fn build_key(&mut self, state: StateId, parts: &[&[u8]]) {
        self.kbuf.clear();
        self.kbuf.extend_from_slice(&(state as u16).to_be_bytes());
        for p in parts {
            self.kbuf.extend_from_slice(p);
        }
    }

    /// Hands every buffered restore run to the loader thread (see `lsm_load`).
    fn ingest_buffers(&mut self) -> Result<()> {
        self.load_bytes = 0;
        self.loader.hand_over(&self.shared, &mut self.load)
    }
}

impl StateBackend for LsmBackend {
    fn backend_name(&self) -> &'static str {
        "lsm"
    }

    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn register_state(&mut self, meta: StateMetaInfo) -> Result<StateId> {
        if let (Some(x), Some(id)) = (
            &self.shared.prefixes,
            self.states.iter().position(|m| m.name == meta.name),
        ) {
            // A width given to a state's keys is what its files' prefix filters were built with: a new
            // namespace serializer of another fixed width would make a checkpoint of this backend, opened
            // with the new meta, probe those filters with prefixes they never saw.
            if let (Some(old), Some(new)) = (x.width(id), x.width_for(&meta)) {
                if old != new {
                    return Err(Error::InvalidArgument(format!(
                        "state '{}': namespace serializer {} would change its keys' prefix from {old} to {new} bytes; the LSM backend cannot re-register a state with another key layout",
                        meta.name, meta.namespace_serializer
                    )));
                }
            }
        }
        if let Some(id) = super::reregister(&mut self.states, &meta)? {
            return Ok(id);
        }
        if self.states.len() > usize::from(u16::MAX) {
            return Err(Error::InvalidArgument(
                "the LSM backend holds at most 65536 states".into(),
            ));
        }
        if let Some(x) = &self.shared.prefixes {
            // Before any key of the state reaches the engine.
            x.register(self.states.len(), &meta);
        }
        self.shared.merges.register(self.states.len(), meta.kind);
        self.states.push(meta);
        self.load.push(LoadRun::default());
        Ok(self.states.len() - 1)
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    #[inline]
    fn get(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<Option<&[u8]>> {
        self.check(state, kg, false, "get")?;
        self.follow_share()?;
        self.build_key(state, &[key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            return cached_read(cache, &self.shared.db, &self.kbuf, &mut self.vbuf);
        }
        let found = self.shared.db.get_into(&self.kbuf, &mut self.vbuf)?;
        Ok(found.then_some(self.vbuf.as_slice()))
    }

    fn multi_get(
        &mut self,
        state: StateId,
        keys: &[(KeyGroup, &[u8])],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<()> {
        // Every engine key `sid | key` in one buffer, then one batched read of the engine for the keys the
        // cache does not hold.
        self.kbuf.clear();
        let mut ends = Vec::with_capacity(keys.len());
        for (kg, key) in keys {
            self.check(state, *kg, false, "multi_get")?;
            self.kbuf.extend_from_slice(&(state as u16).to_be_bytes());
            self.kbuf.extend_from_slice(key);
            ends.push(self.kbuf.len());
        }
        // Not counted in the cache's window; aside, the cache is empty and the engine answers.
        let cached = self.cached_kind(state) && self.rmw_cache_active();
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            let mut start = 0;
            let mut hits = Vec::with_capacity(keys.len());
            let mut misses: Vec<&[u8]> = Vec::new();
            for &end in &ends {
                let k = self.kbuf.get(start..end).unwrap_or(&[]);
                start = end;
                let hit = cache.lookup(k);
                if hit.is_none() {
                    misses.push(k);
                }
                hits.push(hit);
            }
            let values = if misses.is_empty() {
                Vec::new()
            } else {
                self.shared.db.multi_get(&misses)?
            };
            let mut values = values.iter();
            for (i, hit) in hits.into_iter().enumerate() {
                match hit {
                    Some(slot) => f(i, cache.value(slot)),
                    None => f(i, values.next().and_then(|v| v.as_deref())),
                }
            }
            return Ok(());
        }
        let mut start = 0;
        let engine_keys: Vec<&[u8]> = ends
            .iter()
            .map(|&end| {
                let k = self.kbuf.get(start..end).unwrap_or(&[]);
                start = end;
                k
            })
            .collect();
        let values = self.shared.db.multi_get(&engine_keys)?;
        for (i, v) in values.iter().enumerate() {
            f(i, v.as_deref());
        }
        Ok(())
    }

    #[inline]
    fn put(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        self.check(state, kg, false, "put")?;
        self.follow_share()?;
        self.build_key(state, &[key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            self.shared.unsynced.store(true, Ordering::Relaxed);
            return cached_write(cache, &self.shared.db, &self.kbuf, Some(value));
        }
        Ok(self.shared.db.put(&self.kbuf, value)?)
    }

    #[inline]
    fn delete(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<()> {
        self.check(state, kg, false, "delete")?;
        self.follow_share()?;
        self.build_key(state, &[key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            self.shared.unsynced.store(true, Ordering::Relaxed);
            return cached_write(cache, &self.shared.db, &self.kbuf, None);
        }
        Ok(self.shared.db.delete(&self.kbuf)?)
    }

    fn append(&mut self, state: StateId, kg: KeyGroup, key: &[u8], elements: &[u8]) -> Result<()> {
        self.check(state, kg, false, "append")?;
        self.follow_share()?;
        if elements.is_empty() {
            return Ok(());
        }
        self.build_key(state, &[key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            self.shared.unsynced.store(true, Ordering::Relaxed);
            return cached_append(cache, &self.shared.db, &self.kbuf, elements, &mut self.vbuf);
        }
        Ok(self.shared.db.merge(&self.kbuf, elements)?)
    }

    fn set_value_merge(&mut self, state: StateId, merge: Arc<dyn super::ValueMerge>) -> bool {
        match self.states.get(state) {
            Some(m) if matches!(m.kind, StateKind::Reducing | StateKind::Aggregating) => {
                self.shared.merges.set_fold(state, merge);
                true
            }
            _ => false,
        }
    }

    fn merge_value(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key: &[u8],
        operand: &[u8],
    ) -> Result<()> {
        self.check(state, kg, false, "merge_value")?;
        self.follow_share()?;
        let Some(fold) = self.shared.merges.fold_of(state) else {
            return Err(super::wrong_kind(&self.states, state, "merge_value"));
        };
        self.build_key(state, &[key]);
        if let Some(cache) = &mut self.cache {
            // A cached value is folded in the cache; an uncached one gets a merge operand, never a read (it
            // is in no pending layer either: those hold only cached keys).
            if let Some(i) = cache.lookup(&self.kbuf) {
                let folded = fold.fold(cache.value(i), &[operand]).ok_or_else(|| {
                    Error::CorruptState {
                        state: self.states[state].name.clone(),
                        detail: "a cached value or the added value does not decode with the state's serializer".into(),
                    }
                })?;
                self.shared.unsynced.store(true, Ordering::Relaxed);
                cache.write(Some(i), &self.kbuf, Some(&folded));
                return settle(cache, &self.shared.db);
            }
        }
        Ok(self.shared.db.merge(&self.kbuf, operand)?)
    }

    fn map_get(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<Option<&[u8]>> {
        self.check(state, kg, true, "map_get")?;
        self.follow_share()?;
        self.build_key(state, &[key_ns, user_key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            let prefix_len = STATE_PREFIX_LEN + key_ns.len();
            return cached_map_read(
                cache,
                &self.shared.db,
                &self.kbuf,
                prefix_len,
                &mut self.vbuf,
            );
        }
        let found = self.shared.db.get_into(&self.kbuf, &mut self.vbuf)?;
        Ok(found.then_some(self.vbuf.as_slice()))
    }

    fn map_put(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        self.check(state, kg, true, "map_put")?;
        self.follow_share()?;
        self.build_key(state, &[key_ns, user_key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            self.shared.unsynced.store(true, Ordering::Relaxed);
            let prefix_len = STATE_PREFIX_LEN + key_ns.len();
            return cached_map_write(cache, &self.shared.db, &self.kbuf, prefix_len, Some(value));
        }
        Ok(self.shared.db.put(&self.kbuf, value)?)
    }

    fn map_remove(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<()> {
        self.check(state, kg, true, "map_remove")?;
        self.follow_share()?;
        self.build_key(state, &[key_ns, user_key]);
        let cached = self.through_cache(state)?;
        if let Some(cache) = self.cache.as_mut().filter(|_| cached) {
            self.shared.unsynced.store(true, Ordering::Relaxed);
            let prefix_len = STATE_PREFIX_LEN + key_ns.len();
            return cached_map_write(cache, &self.shared.db, &self.kbuf, prefix_len, None);
        }
        Ok(self.shared.db.delete(&self.kbuf)?)
    }

    fn map_put_all(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        entries: &[(&[u8], &[u8])],
    ) -> Result<()> {
        self.check(state, kg, true, "map_put")?;
        self.follow_share()?;
        // Aside, each entry goes to the engine as a `map_put` (counted in the cache's window, sampled).
        if !(self.cached_kind(state) && self.rmw_cache_active()) {
            return super::map_put_each(self, state, kg, key_ns, entries);
        }
        self.build_key(state, &[key_ns]);
        let (prefix, mut keys) = (
            std::mem::take(&mut self.kbuf),
            std::mem::take(&mut self.vbuf),
        );
        self.shared.unsynced.store(true, Ordering::Relaxed);
        let res = match &mut self.cache {
            Some(cache) => cached_map_put_all(cache, &self.shared.db, &prefix, entries, &mut keys),
            None => Ok(()),
        };
        (self.kbuf, self.vbuf) = (prefix, keys);
        res
    }

    fn map_is_empty(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<bool> {
        self.check(state, kg, true, "map_scan")?;
        self.build_key(state, &[key_ns]);
        let timers = self.states[state].kind == StateKind::Timers;
        if let Some(cache) = self.cache.as_mut().filter(|_| !timers) {
            // A current entry of the map in the cache answers; otherwise the engine's entries (with the
            // map's dirty ones merged) are read up to the first.
            if cache.map_has_live_dirty(&self.kbuf) {
                return Ok(false);
            }
        }
        if let Some(empty) = self.complete_map_is_empty(state) {
            return Ok(empty);
        }
        // Up to the first entry: the map is not taken in whole for this.
        let mut empty = true;
        let mut first = |_: &[u8], _: &[u8]| {
            empty = false;
            false
        };
        if !self.merged_map_scan(state, &[], false, &mut first)? {
            let prefix = std::mem::take(&mut self.kbuf);
            let res = self.scan_prefix(&prefix, &mut first);
            self.kbuf = prefix;
            res?;
        }
        Ok(empty)
    }

    fn map_scan(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check(state, kg, true, "map_scan")?;
        self.build_key(state, &[key_ns]);
        let skip = self.kbuf.len();
        // The map's dirty entries merged with the engine's: nothing is written back.
        if self.merged_map_scan(state, &[], true, f)? {
            return Ok(());
        }
        let prefix = std::mem::take(&mut self.kbuf);
        let res = self.scan_prefix(&prefix, &mut |k, v| f(&k[skip..], v));
        self.kbuf = prefix;
        res
    }

    fn map_scan_from(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.check(state, kg, true, "map_scan")?;
        self.build_key(state, &[key_ns]);
        let skip = self.kbuf.len();
        if self.merged_map_scan(state, from, true, f)? {
            return Ok(());
        }
        let upper = prefix_successor(&self.kbuf);
        let lower = [self.kbuf.as_slice(), from].concat();
        // Seek straight to `from`: deleted entries before it (removed timers) are never passed over.
        let mut it = self.shared.db.iter(bounds(None, lower, upper));
        it.seek_to_first();
        while it.valid() {
            if !f(&it.key()[skip..], it.value()) {
                return Ok(());
            }
            it.next();
        }
        Ok(it.take_status()?)
    }

    fn map_clear(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<()> {
        // Point deletes (as Flink's RocksDB backend does) rather than a range tombstone per cleared map:
        // range tombstones are checked by every read, so many small ones would slow down every `get`.
        self.check(state, kg, true, "map_clear")?;
        self.build_key(state, &[key_ns]);
        let timers = self.states[state].kind == StateKind::Timers;
        if let Some(cache) = self.cache.as_mut().filter(|_| !timers) {
            if let Some(dirty) = cache.map_dirty(&self.kbuf) {
                // The map's dirty entries become dirty deletes; the engine's others are deleted in the
                // engine (none of them is in a pending layer: those hold only dirty keys), their clean
                // cached entries forgotten. Nothing is written back.
                self.shared.unsynced.store(true, Ordering::Relaxed);
                let db = &self.shared.db;
                let prefix_len = self.kbuf.len();
                cache.delete_complete_map(&self.kbuf);
                for (k, v) in &dirty {
                    if v.is_some() {
                        let k = k.as_slice();
                        let slot = cache.lookup(k);
                        cache.write_map(slot, k, prefix_len, None);
                    }
                }
                let mut it = db.iter(prefix_bounds(&self.kbuf));
                it.seek_to_first();
                let mut batch = WriteBatch::new();
                while it.valid() {
                    let k = it.key();
                    if dirty
                        .binary_search_by(|(d, _)| d.as_slice().cmp(k))
                        .is_err()
                    {
                        cache.forget_clean(k);
                        batch.delete(k);
                        if batch.len() >= BATCH_OPS {
                            db.write(&batch)?;
                            batch.clear();
                        }
                    }
                    it.next();
                }
                it.take_status()?;
                db.write(&batch)?;
                return settle(cache, db);
            }
        }
        // The engine holds every entry of the map once the cache is written back; the cached (clean)
        // entries of the map are forgotten as they are deleted.
        self.write_back()?;
        let prefix = std::mem::take(&mut self.kbuf);
        let mut batch = WriteBatch::new();
        let mut res = Ok(());
        let mut cache = self.cache.take();
        let scanned = self.scan_prefix(&prefix, &mut |k, _| {
            if let Some(c) = &mut cache {
                c.forget_clean(k);
            }
            batch.delete(k);
            if batch.len() >= BATCH_OPS {
                res = self.shared.db.write(&batch);
                batch.clear();
            }
            res.is_ok()
        });
        self.kbuf = prefix;
        self.cache = cache;
        scanned?;
        res?;
        Ok(self.shared.db.write(&batch)?)
    }

    fn scan_state(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(KeyGroup, &[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownStateId(state));
        }
        self.write_back()?;
        let prefix = (state as u16).to_be_bytes();
        let pl = self.prefix_len;
        let mut bad: Option<Vec<u8>> = None;
        self.scan_prefix(&prefix, &mut |k, v| {
            let entry = &k[STATE_PREFIX_LEN..];
            match read_key_group_prefix(entry, pl) {
                Some(kg) => f(kg, entry, v),
                None => {
                    bad = Some(k.to_vec());
                    false
                }
            }
        })?;
        match bad {
            Some(k) => Err(Error::Corruption {
                at: Location::file(self.path()),
                detail: format!("engine key {k:?} has no key-group prefix"),
            }),
            None => Ok(()),
        }
    }

    fn scan_key_group(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownStateId(state));
        }
        let range = self.config.key_group_range;
        if !range.contains(kg) {
            return Err(super::out_of_range(range, kg));
        }
        self.write_back()?;
        let mut prefix = (state as u16).to_be_bytes().to_vec();
        write_key_group_prefix(&mut prefix, kg, self.prefix_len);
        self.scan_prefix(&prefix, &mut |k, v| f(&k[STATE_PREFIX_LEN..], v))
    }

    fn transform_values(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        if state >= self.states.len() {
            return Err(Error::UnknownStateId(state));
        }
        self.forget_cache()?;
        // The iterator reads at the sequence number it was created at, so the writes below are not seen.
        let prefix = (state as u16).to_be_bytes();
        let db = &self.shared.db;
        let mut it = db.iter(prefix_bounds(&prefix));
        it.seek_to_first();
        let mut batch = WriteBatch::new();
        while it.valid() {
            match f(it.value())? {
                Some(v) => batch.put(it.key(), &v),
                None => batch.delete(it.key()),
            };
            if batch.len() >= BATCH_OPS {
                db.write(&batch)?;
                batch.clear();
            }
            it.next();
        }
        it.take_status()?;
        Ok(db.write(&batch)?)
    }

    fn load_entry(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        if !self.config.key_group_range.contains(kg) {
            return Err(Error::KeyGroupOutOfRange {
                key_group: kg,
                range: self.config.key_group_range,
            });
        }
        if state >= self.states.len() {
            return Err(Error::UnknownStateId(state));
        }
        // Restored entries reach the engine behind the cache: nothing it holds (an absent key read
        // earlier, say) may hide them.
        self.forget_cache()?;
        self.build_key(state, &[key]);
        if !self.load[state].accepts(&self.kbuf) {
            // Out of order (savepoints with overlapping ranges): ingest everything buffered and wait for it,
            // then put this one, newer than all of it.
            self.ingest_buffers()?;
            self.loader.drain()?;
            #[cfg(test)]
            assert!(
                self.loader.is_idle(),
                "a put during a restore must follow every ingestion"
            );
            self.shared.db.put(&self.kbuf, value)?;
            return Ok(());
        }
        self.load[state].push(&self.kbuf, value);
        self.load_bytes += self.kbuf.len() + value.len();
        if self.load_bytes >= self.load_buffer_bytes {
            self.ingest_buffers()?;
        }
        Ok(())
    }

    fn finish_load(&mut self) -> Result<()> {
        self.forget_cache()?;
        let handed = self.ingest_buffers();
        let drained = self.loader.drain();
        // Reset even after a failure: the next restore starts afresh.
        for run in &mut self.load {
            run.finish();
        }
        handed.and(drained)
    }

    fn num_entries(&mut self) -> Result<u64> {
        // Whatever a restore handed over and whatever the cache holds dirty are in the engine first.
        self.loader.drain()?;
        self.write_back()?;
        let mut n = 0u64;
        let mut it = self.shared.db.iter(ReadOptions::default());
        it.seek_to_first();
        while it.valid() {
            n += 1;
            it.next();
        }
        it.take_status()?;
        Ok(n)
    }

    fn view_materialization(&mut self) -> Option<Box<dyn super::MaterializationCapture>> {
        capture::view_materialization(&self.shared)
    }

    fn checkpoint_capture(&mut self) -> Result<Box<dyn super::CheckpointCapture>> {
        self.loader.drain()?;
        // Synchronous part: the cache's dirty log becomes an immutable layer (O(1), as for a snapshot), then
        // the engine pins its seqno and switches its memtable. The engine holds no value newer than a
        // pending layer's, so the layers, written above the engine's files by the asynchronous part, give
        // exactly the state of this moment (`design/rmw-cache.md`).
        // With the cache, the engine reserves `S + 1` for the layers' files, which it then adopts as its own
        // L0 files unless the backend wrote one of the layers into the engine first (`capture.rs`). Layers
        // already in the engine through an earlier capture's adopted files are left out.
        let Some(cache) = self.cache.as_mut() else {
            let pending = self.shared.db.begin_checkpoint()?;
            return Ok(Box::new(LsmCapture {
                pending,
                shared: Arc::clone(&self.shared),
                layers: Vec::new(),
                ledger: None,
            }));
        };
        let ledger = Arc::clone(cache.ledger());
        let adopted = ledger.adopted_below();
        let mut layers = cache.hand_off();
        layers.retain(|l| l.epoch() >= adopted);
        let pending = self.shared.db.begin_checkpoint_for_overlay()?;
        Ok(Box::new(LsmCapture {
            pending,
            shared: Arc::clone(&self.shared),
            layers,
            ledger: Some(ledger),
        }))
    }

    fn set_ttl_filter(&mut self, state: StateId, filter: Option<crate::ttl::TtlStateFilter>) {
        let ttl = self.states.get(state).and_then(|m| m.ttl.as_ref());
        let query_every = ttl.and_then(|t| t.cleanup_compaction_filter);
        let periodic = ttl.and_then(|t| t.periodic_compaction_millis);
        // Only states whose TTL asks for compaction-filter cleanup get a filter.
        let filter = filter.filter(|_| query_every.is_some());
        self.shared
            .ttl
            .set(state, filter, query_every.unwrap_or(1), periodic);
    }

    fn write_back(&mut self) -> Result<()> {
        LsmBackend::write_back(self)
    }

    fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>> {
        // Whatever a restore handed over is in the engine first.
        self.loader.drain()?;
        // Synchronous part: register the current sequence number (O(1)); compaction keeps every version it
        // reads until the snapshot is dropped, and range deletes stop dropping whole files under it. The
        // cache's dirty log is handed over as an immutable layer (O(1)), read on top of the engine.
        let snap = self.shared.db.snapshot();
        let layers = self
            .cache
            .as_mut()
            .map(RmwCache::hand_off)
            .unwrap_or_default();
        Ok(Box::new(LsmSnapshot {
            config: self.config.clone(),
            prefix_len: self.prefix_len,
            states: self.states.clone(),
            shared: Arc::clone(&self.shared),
            snap,
            cursors: Mutex::new(Vec::new()),
            layers,
            overlay: std::sync::OnceLock::new(),
        }))
    }
}

#[cfg(test)]
mod map_mark_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygroup::KeyGroupRange;
    use crate::serializer::{
        IntSerializer, LongSerializer, SerializerSnapshot, StringSerializer, TypeSerializer,
    };

    fn long_keys() -> BackendConfig {
        BackendConfig {
            max_parallelism: 8,
            key_group_range: KeyGroupRange::all(8),
            key_serializer: LongSerializer.snapshot(),
        }
    }

    fn map_meta(name: &str, ns: SerializerSnapshot) -> StateMetaInfo {
        StateMetaInfo {
            name: name.into(),
            kind: StateKind::Map,
            namespace_serializer: ns,
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        }
    }

    #[test]
    fn a_list_grown_past_a_full_cache_goes_to_the_engine_itself_not_the_other_entries() -> Result<()>
    {
        use crate::backend::lsm_cache::ENTRY_OVERHEAD;
        use crate::layout::LIST_DELIMITER;
        use crate::serializer::VoidNamespaceSerializer;
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        let s = b.register_state(StateMetaInfo {
            name: "l".into(),
            kind: StateKind::List,
            namespace_serializer: VoidNamespaceSerializer.snapshot(),
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        })?;
        // Room for four short lists, with the doorkeeper (a full cache writes around it).
        b.set_rmw_cache_capacity(4 * ENTRY_OVERHEAD + 32)?;
        b.set_rmw_cache_admission(false)?;
        let kg = KeyGroup::from(0u8);
        for k in 0..4u8 {
            b.append(s, kg, &[k], &[k])?;
        }
        let in_engine = |b: &LsmBackend, k: u8| b.db().get(&[0, 0, k]);
        let grown = |k: u8| [&[k, LIST_DELIMITER][..], &[7u8; 40]].concat();
        // A dirty list that no longer fits: written whole with the elements, the others stay dirty.
        b.append(s, kg, &[0], &[7u8; 40])?;
        assert_eq!(in_engine(&b, 0)?.as_deref(), Some(&grown(0)[..]));
        for k in 1..4 {
            assert_eq!(in_engine(&b, k)?, None, "list {k} pushed out");
        }
        assert_eq!(b.get(s, kg, &[0])?, Some(&grown(0)[..]));
        // A clean one (the cache full again): the elements become a merge operand in the engine.
        b.append(s, kg, &[4], &[4])?;
        b.write_back()?;
        b.append(s, kg, &[1], &[7u8; 40])?;
        assert_eq!(in_engine(&b, 1)?.as_deref(), Some(&grown(1)[..]));
        assert_eq!(b.get(s, kg, &[1])?, Some(&grown(1)[..]));
        assert_eq!(b.get(s, kg, &[2])?, Some(&[2u8][..]));
        Ok(())
    }

    #[test]
    fn restore_hands_sorted_runs_to_the_loader_and_keeps_arrival_order() -> Result<()> {
        use crate::serializer::VoidNamespaceSerializer;
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        b.load_buffer_bytes = 300;
        let value = |name: &str| StateMetaInfo {
            name: name.into(),
            kind: StateKind::Value,
            namespace_serializer: VoidNamespaceSerializer.snapshot(),
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        };
        let v = b.register_state(value("v"))?;
        let m = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        b.put(v, 0, &[0, 200], b"kept")?;
        for kg in 1..6u8 {
            for i in 0..20u8 {
                b.load_entry(v, kg as KeyGroup, &[kg, i], &[i])?;
                b.load_entry(m, kg as KeyGroup, &[kg, 1, i], &[0, i])?;
            }
        }
        // Out of order and a duplicate: written after everything before them, so the last arrival wins.
        b.load_entry(v, 7, &[7, 2], b"first")?;
        b.load_entry(v, 7, &[7, 1], b"one")?;
        b.load_entry(v, 7, &[7, 2], b"last")?;
        b.load_entry(v, 7, &[7, 3], b"three")?;
        b.finish_load()?;
        // Many hand-overs, each its own ingestion.
        let files: usize = b.db().stats().level_files.iter().sum();
        assert!(files >= 5, "{files} files");
        assert_eq!(b.num_entries()?, 1 + 100 + 100 + 3);
        assert_eq!(b.get(v, 0, &[0, 200])?, Some(&b"kept"[..]));
        assert_eq!(b.get(v, 3, &[3, 7])?, Some(&[7u8][..]));
        assert_eq!(b.get(v, 7, &[7, 2])?, Some(&b"last"[..]));
        assert_eq!(b.get(v, 7, &[7, 3])?, Some(&b"three"[..]));
        let mut seen = Vec::new();
        b.map_scan(m, 5, &[5, 1], &mut |uk, val| {
            seen.push((uk.to_vec(), val.to_vec()));
            true
        })?;
        assert_eq!(seen.len(), 20);
        assert_eq!(seen[19], (vec![19], vec![0, 19]));
        // A second restore into other key groups starts a new loader.
        b.load_entry(v, 6, &[6, 1], b"again")?;
        b.finish_load()?;
        assert_eq!(b.get(v, 6, &[6, 1])?, Some(&b"again"[..]));
        Ok(())
    }

    #[test]
    fn map_reads_skip_files_without_the_map() -> Result<()> {
        // The engine's filters, without the read-modify-write cache answering first, and with the four
        // flushes below the L0 trigger, so that no background compaction merges the files under the reads.
        let options = keyed_state_lsm::Options {
            l0_compaction_trigger: 8,
            ..LsmBackend::small_options()
        };
        let mut b = LsmBackend::temp_with(long_keys(), options)?.with_rmw_cache(0)?;
        let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        let key_ns = |k: i64| [&[1u8][..], &k.to_be_bytes(), &0i32.to_be_bytes()].concat();
        // Four files, each holding the maps of every fourth key.
        for f in 0..4i64 {
            for k in (0..40).filter(|k| k % 4 == f) {
                for uk in 0..5i64 {
                    b.map_put(s, 1, &key_ns(k), &uk.to_be_bytes(), &[k as u8, uk as u8])?;
                }
            }
            b.db().flush()?;
        }
        let before = b.db().stats().prefix_filter_skips;
        for k in 0..40i64 {
            let mut n = 0;
            b.map_scan(s, 1, &key_ns(k), &mut |uk, v| {
                assert_eq!(v, [k as u8, uk[7]]);
                n += 1;
                true
            })?;
            assert_eq!(n, 5, "map of key {k}");
            assert_eq!(
                b.map_get(s, 1, &key_ns(k), &3i64.to_be_bytes())?,
                Some(&[k as u8, 3][..])
            );
        }
        // Every scan leaves out (almost always) the three files without its map.
        let skips = b.db().stats().prefix_filter_skips - before;
        assert!(skips >= 40 * 3 * 9 / 10, "only {skips} files skipped");
        Ok(())
    }

    #[test]
    fn a_scan_of_a_map_held_only_as_dirty_entries_opens_no_engine_iterator() -> Result<()> {
        let options = keyed_state_lsm::Options {
            l0_compaction_trigger: 8,
            ..LsmBackend::small_options()
        };
        let mut b = LsmBackend::temp_with(long_keys(), options)?;
        b.set_rmw_cache_capacity(64 << 20)?;
        let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        let key_ns = |k: i64| [&[1u8][..], &k.to_be_bytes(), &0i32.to_be_bytes()].concat();
        // Other maps in files whose key ranges span the map's (so that an engine iterator over the map
        // would consult their filters and skip them), then the map only in the cache.
        for f in 0..3i64 {
            b.map_put(s, 1, &key_ns(f), &[1], &[1])?;
            b.map_put(s, 1, &key_ns(20 + f), &[1], &[1])?;
            b.write_back()?;
            b.db().flush()?;
        }
        for uk in 0..5u8 {
            b.map_put(s, 1, &key_ns(9), &[uk], &[uk])?;
        }
        let before = b.db().stats().prefix_filter_skips;
        let mut got = Vec::new();
        b.map_scan(s, 1, &key_ns(9), &mut |uk, v| {
            got.push((uk.to_vec(), v.to_vec()));
            true
        })?;
        assert_eq!(
            got,
            (0..5u8).map(|u| (vec![u], vec![u])).collect::<Vec<_>>()
        );
        assert_eq!(
            b.db().stats().prefix_filter_skips,
            before,
            "an engine iterator was built"
        );
        Ok(())
    }

    #[test]
    fn reopening_a_directory_whose_last_run_deleted_everything_brings_nothing_back() -> Result<()> {
        // Found by a second reading: a file holding only tombstones, filtered by the widths of the earlier
        // run, was skipped, and an older put of the same key bytes came back.
        let dir = tempfile::tempdir().map_err(Error::io_at(
            "creating a temporary directory in",
            std::env::temp_dir(),
        ))?;
        let key_ns = [&[1u8][..], &7i64.to_be_bytes(), &3i32.to_be_bytes()].concat();
        let uk = 0x0102030405060708i64.to_be_bytes();
        let other = [1u8, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        {
            let mut b = LsmBackend::open(dir.path(), long_keys(), LsmBackend::small_options())?;
            let s = b.register_state(map_meta("a", IntSerializer.snapshot()))?;
            let t = b.register_state(map_meta("t", StringSerializer.snapshot()))?;
            b.map_put(s, 1, &key_ns, &uk, b"old")?;
            b.map_put(t, 1, &other, &[1], b"x")?;
            b.db().flush()?;
            b.map_remove(s, 1, &key_ns, &uk)?;
            b.db().flush()?;
            b.map_remove(t, 1, &other, &[1])?;
            b.db().flush()?;
            assert!(b.map_get(s, 1, &key_ns, &uk)?.is_none());
        }
        let mut b = LsmBackend::open(dir.path(), long_keys(), LsmBackend::small_options())?;
        // The same state id, now with an 8-byte namespace: the same bytes are a shorter map key.
        let s = b.register_state(map_meta("b", LongSerializer.snapshot()))?;
        let key_ns2 = [&key_ns[..], &uk[..4]].concat();
        assert_eq!(b.map_get(s, 1, &key_ns2, &uk[4..])?, None);
        assert_eq!(b.num_entries()?, 0);
        Ok(())
    }

    #[test]
    fn re_registering_a_state_with_a_namespace_of_another_width_is_refused() -> Result<()> {
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        let key_ns = [&[1u8][..], &7i64.to_be_bytes(), &3i32.to_be_bytes()].concat();
        b.map_put(s, 1, &key_ns, &9i64.to_be_bytes(), b"v")?;
        b.db().flush()?;
        let err = b
            .register_state(map_meta("m", LongSerializer.snapshot()))
            .unwrap_err();
        assert!(
            err.to_string().contains("prefix from 15 to 19 bytes"),
            "{err}"
        );
        // The same width, and a namespace of varying length (no width: the state keeps its own), are fine.
        assert_eq!(
            b.register_state(map_meta("m", IntSerializer.snapshot()))?,
            s
        );
        assert_eq!(
            b.register_state(map_meta("m", StringSerializer.snapshot()))?,
            s
        );
        // A checkpoint opened with the latest meta still finds the entry.
        let dir = tempfile::tempdir().map_err(Error::io_at(
            "creating a temporary directory in",
            std::env::temp_dir(),
        ))?;
        let cp = dir.path().join("cp");
        b.checkpoint(&cp)?;
        let states = b.states().to_vec();
        let mut c =
            LsmBackend::open_checkpoint(&cp, long_keys(), states, LsmBackend::small_options())?;
        assert_eq!(
            c.map_get(s, 1, &key_ns, &9i64.to_be_bytes())?,
            Some(&b"v"[..])
        );
        Ok(())
    }

    #[test]
    fn snapshot_visits_in_any_key_group_order() -> Result<()> {
        use crate::serializer::{LongSerializer, TypeSerializer, VoidNamespaceSerializer};
        let config = BackendConfig {
            max_parallelism: 8,
            key_group_range: KeyGroupRange::all(8),
            key_serializer: LongSerializer.snapshot(),
        };
        let mut b = LsmBackend::temp_with(config, LsmBackend::small_options())?;
        let meta = |name: &str| StateMetaInfo {
            name: name.into(),
            kind: StateKind::Value,
            namespace_serializer: VoidNamespaceSerializer.snapshot(),
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        };
        let s0 = b.register_state(meta("a"))?;
        let s1 = b.register_state(meta("b"))?;
        // Key groups 1, 2, 5 and 7 hold data; 0, 3, 4 and 6 are empty.
        for kg in [1u16, 2, 5, 7] {
            for i in 0..3u8 {
                let key = [kg as u8, i, 0];
                b.put(s0, kg, &key, &[i])?;
                b.put(s1, kg, &key, &[i, i])?;
            }
        }
        let snap = b.snapshot()?;
        let visit = |state, kg: KeyGroup| -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
            let mut out = Vec::new();
            snap.visit(state, kg, &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })?;
            Ok(out)
        };
        let expect = |kg: KeyGroup, width: usize| -> Vec<(Vec<u8>, Vec<u8>)> {
            if ![1, 2, 5, 7].contains(&kg) {
                return Vec::new();
            }
            (0..3u8)
                .map(|i| (vec![kg as u8, i, 0], vec![i; width]))
                .collect()
        };
        for kg in [0, 1, 2, 3, 4, 5, 6, 7, 7, 5, 0, 2, 2, 6, 1, 3, 7] {
            assert_eq!(visit(s0, kg)?, expect(kg, 1), "state a, kg {kg}");
            assert_eq!(visit(s1, kg)?, expect(kg, 2), "state b, kg {kg}");
        }
        // Writes after the snapshot stay invisible to the reused iterators.
        b.put(s0, 3, &[3, 0, 0], &[9])?;
        assert!(visit(s0, 3)?.is_empty());
        Ok(())
    }

    #[cfg(feature = "checkpoints")]
    #[test]
    fn a_checkpoint_holds_the_dirty_entries_of_its_synchronous_part_and_none_written_after(
    ) -> Result<()> {
        use crate::checkpoint::{
            restore_lsm_temp, CheckpointOptions, CheckpointStorage, Checkpointer,
        };
        use crate::serializer::VoidNamespaceSerializer;
        use std::collections::BTreeMap;
        let meta = StateMetaInfo {
            name: "v".into(),
            kind: StateKind::Value,
            namespace_serializer: VoidNamespaceSerializer.snapshot(),
            value_serializer: LongSerializer.snapshot(),
            ttl: None,
        };
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        let s = b.register_state(meta)?;
        let key = |i: u16| [(i % 8) as u8, (i >> 8) as u8, i as u8];
        let mut model: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
        let put = |b: &mut LsmBackend, m: &mut BTreeMap<u16, Vec<u8>>, i: u16, v: &[u8]| {
            m.insert(i, v.to_vec());
            b.put(s, KeyGroup::from((i % 8) as u8), &key(i), v)
        };
        // In engine files, without the cache.
        for i in 0..300 {
            put(&mut b, &mut model, i, b"engine")?;
        }
        b.db().flush()?;
        b.set_rmw_cache_capacity(64 << 20)?;
        b.set_rmw_cache_admission(true)?;
        // Dirty in a pending layer (a snapshot's hand-off), then in the current log; deletes too.
        for i in 100..200 {
            put(&mut b, &mut model, i, b"layer")?;
        }
        let snap = b.snapshot()?;
        for i in 150..400 {
            put(&mut b, &mut model, i, b"log")?;
        }
        for i in (0..400).step_by(7) {
            model.remove(&i);
            b.delete(s, KeyGroup::from((i % 8) as u8), &key(i))?;
        }
        let expected = model.clone();
        let storage = Arc::new(CheckpointStorage::in_memory()?);
        let ck = Checkpointer::open(
            Arc::clone(&storage),
            &long_keys(),
            CheckpointOptions::default(),
        )?;
        let pending = ck.begin(1, &mut b)?;
        // After the synchronous part: new values, deletes and new keys, some written back by a scan.
        for i in (0..500).step_by(3) {
            put(&mut b, &mut model, i, b"after")?;
        }
        b.scan_key_group(s, 3, &mut |_, _| true)?;
        for i in (1..500).step_by(5) {
            b.delete(s, KeyGroup::from((i % 8) as u8), &key(i))?;
        }
        pending.run()?;
        ck.notify_complete(1)?;
        drop(snap);
        let (mut r, _) = restore_lsm_temp(&storage, 1, long_keys(), LsmBackend::small_options())?;
        for i in 0..500u16 {
            let got = r
                .get(s, KeyGroup::from((i % 8) as u8), &key(i))?
                .map(<[u8]>::to_vec);
            assert_eq!(got.as_ref(), expected.get(&i), "key {i}");
        }
        assert_eq!(r.num_entries()?, expected.len() as u64);
        Ok(())
    }

    #[test]
    fn the_rmw_cache_is_charged_to_the_environment_memory_budget() -> Result<()> {
        use crate::env::{StateEnv, StateEnvOptions};
        let env = StateEnv::new(StateEnvOptions {
            memory_budget: Some(64 << 20),
            ..StateEnvOptions::default()
        })?;
        let before = env.stats();
        assert_eq!(before.memory.reserved, 0);
        let b = env.temp_lsm(long_keys(), LsmBackend::small_options())?;
        let mut b = b.with_rmw_cache(8 << 20)?;
        // The capacity, the doorkeeper (one u32 per 256 bytes of capacity) and the hash table's buckets for
        // the most entries the capacity holds (8 MiB / 96 bytes: 87,382 entries, at most 13/16 of 131,072
        // buckets of 8 bytes).
        let footprint = (8 << 20) + (8 << 20) / 256 * 4 + (1 << 20);
        let stats = env.stats();
        assert_eq!(stats.memory.reserved, footprint, "{stats:?}");
        assert!(stats.memory.total() >= footprint);
        assert!(
            stats
                .block_cache_capacity
                .is_some_and(|c| c <= (64 << 20) - footprint),
            "{stats:?}"
        );
        // Resized with the capacity, kept across a change of admission, gone with the cache and the backend.
        // 4 MiB: 65,536 buckets (the table, grown with its entries, has fewer); 1 MiB: 16,384.
        b.set_rmw_cache_capacity(4 << 20)?;
        assert_eq!(
            env.stats().memory.reserved,
            (4 << 20) + (4 << 20) / 256 * 4 + (512 << 10)
        );
        b.set_rmw_cache_admission(true)?;
        assert_eq!(env.stats().memory.reserved, (4 << 20) + (512 << 10));
        b.set_rmw_cache_capacity(0)?;
        assert_eq!(env.stats().memory.reserved, 0);
        // A cache made later keeps the admission chosen before (first touch: no doorkeeper).
        b.set_rmw_cache_capacity(1 << 20)?;
        assert_eq!(env.stats().memory.reserved, (1 << 20) + (128 << 10));
        drop(b);
        assert_eq!(env.stats().memory.reserved, 0);
        Ok(())
    }

    #[test]
    fn map_scans_and_clears_merge_the_caches_dirty_entries_exactly() -> Result<()> {
        use std::collections::BTreeMap;
        // Maps of two prefix widths in one state (a 1-byte and a 2-byte key_ns), so that the index is
        // sometimes mixed; a small cache evicting, pending layers from snapshots, flushes.
        for (capacity, first_touch) in [(64usize << 20, true), (2 << 10, true), (64 << 20, false)] {
            let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
            b.set_rmw_cache_capacity(capacity)?;
            b.set_rmw_cache_admission(first_touch)?;
            let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
            let mut model: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>> = BTreeMap::new();
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let mut snaps = Vec::new();
            for step in 0..3000 {
                let m = next(12);
                // key_ns: `[kg]`, or `[kg, m]` for maps 8.. (the mixed widths).
                let key_ns = if m < 8 {
                    vec![1, m as u8]
                } else {
                    vec![1, m as u8, 0]
                };
                let uk = vec![next(6) as u8];
                match next(20) {
                    0..=6 => {
                        let v = vec![step as u8, (step >> 8) as u8];
                        b.map_put(s, 1, &key_ns, &uk, &v)?;
                        model.entry(key_ns).or_default().insert(uk, v);
                    }
                    7 | 8 => {
                        // A batch, with a user key twice (the last value wins); some longer than a chunk of
                        // prefetched lookups.
                        let n = 1 + next(20) as usize;
                        let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
                            .map(|j| (vec![next(6) as u8], vec![step as u8, j as u8]))
                            .chain([(uk.clone(), vec![0xEE])])
                            .collect();
                        let pairs: Vec<(&[u8], &[u8])> = batch
                            .iter()
                            .map(|(k, v)| (k.as_slice(), v.as_slice()))
                            .collect();
                        b.map_put_all(s, 1, &key_ns, &pairs)?;
                        model.entry(key_ns).or_default().extend(batch);
                    }
                    9..=11 => {
                        b.map_remove(s, 1, &key_ns, &uk)?;
                        model.entry(key_ns).or_default().remove(&uk);
                    }
                    12 => {
                        b.map_clear(s, 1, &key_ns)?;
                        model.remove(&key_ns);
                    }
                    13 => {
                        snaps.push(b.snapshot()?);
                        if snaps.len() > 3 {
                            snaps.remove(0);
                        }
                    }
                    14 => b.db().flush()?,
                    15..=17 => {
                        let from = vec![next(6) as u8];
                        let mut got = Vec::new();
                        b.map_scan_from(s, 1, &key_ns, &from, &mut |k, v| {
                            got.push((k.to_vec(), v.to_vec()));
                            true
                        })?;
                        let want: Vec<_> = model
                            .get(&key_ns)
                            .map(|e| {
                                e.range(from..)
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect()
                            })
                            .unwrap_or_default();
                        assert_eq!(got, want, "scan from, step {step}, map {key_ns:?}");
                    }
                    _ => {
                        let mut got = Vec::new();
                        b.map_scan(s, 1, &key_ns, &mut |k, v| {
                            got.push((k.to_vec(), v.to_vec()));
                            true
                        })?;
                        // Entries of longer maps starting with this prefix are part of its scan.
                        let want: Vec<_> = model
                            .iter()
                            .filter(|(p, _)| p.starts_with(&key_ns))
                            .flat_map(|(p, e)| {
                                let rest = &p[key_ns.len()..];
                                e.iter()
                                    .map(move |(k, v)| ([rest, &k[..]].concat(), v.clone()))
                            })
                            .collect::<BTreeMap<_, _>>()
                            .into_iter()
                            .collect();
                        assert_eq!(got, want, "scan, step {step}, map {key_ns:?}");
                        assert_eq!(
                            b.map_is_empty(s, 1, &key_ns)?,
                            want.is_empty(),
                            "is empty, step {step}, map {key_ns:?}"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_merged_map_scan_stopped_early_returns_the_engines_read_error() -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        b.set_rmw_cache_capacity(64 << 20)?;
        let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        let map = [1u8, 7];
        for k in 0..40u8 {
            b.map_put(s, 1, &map, &[k], &[k; 64])?;
        }
        b.write_back()?;
        b.db().flush()?;
        // Damage the data blocks of every table file (in place: the files are mapped), then dirty one
        // entry of the map, after all of the engine's, so that the scan merges the two.
        let mut damaged = 0;
        for e in std::fs::read_dir(b.db().path()).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "sst") {
                let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                for at in [8u64, 40, 200] {
                    file.write_at(&[0xA5], at).unwrap();
                }
                damaged += 1;
            }
        }
        assert!(damaged > 0, "no table file");
        b.map_put(s, 1, &map, &[200], &[1])?;
        // A caller stopping at its first entry (as a map iterator at a full batch) still gets the error.
        let mut seen = 0;
        let res = b.map_scan(s, 1, &map, &mut |_, _| {
            seen += 1;
            false
        });
        assert!(
            res.is_err(),
            "the read error was lost ({seen} entries seen)"
        );
        Ok(())
    }

    #[test]
    fn a_scan_of_a_large_dirty_map_keeps_no_large_slot_list_behind() -> Result<()> {
        let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
        b.set_rmw_cache_capacity(256 << 20)?;
        let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
        let (large, small) = ([1u8, 7], [1u8, 8]);
        let n = 70_000u32;
        for k in 0..n {
            b.map_put(s, 1, &large, &k.to_be_bytes(), &[1])?;
        }
        b.map_put(s, 1, &small, &[1], &[1])?;
        let mut seen = 0u32;
        b.map_scan(s, 1, &large, &mut |_, _| {
            seen += 1;
            true
        })?;
        assert_eq!(seen, n);
        assert!(
            b.map_slots.capacity() <= 64 << 10,
            "{}",
            b.map_slots.capacity()
        );
        // A small map's list is kept for the next scan.
        b.map_scan(s, 1, &small, &mut |_, _| true)?;
        assert!(b.map_slots.capacity() > 0);
        Ok(())
    }

    #[test]
    fn map_is_empty_follows_removes_clears_evictions_and_hand_offs() -> Result<()> {
        for first_touch in [true, false] {
            let mut b = LsmBackend::temp_with(long_keys(), LsmBackend::small_options())?;
            b.set_rmw_cache_capacity(64 << 20)?;
            b.set_rmw_cache_admission(first_touch)?;
            let s = b.register_state(map_meta("m", IntSerializer.snapshot()))?;
            let (map, other) = ([1u8, 7], [1u8, 8]);
            assert!(b.map_is_empty(s, 1, &map)?);
            // A dirty entry answers; removed, the map is empty again (a dirty delete over nothing).
            b.map_put(s, 1, &map, &[1], &[10])?;
            b.map_put(s, 1, &other, &[1], &[10])?;
            assert!(!b.map_is_empty(s, 1, &map)?);
            b.map_remove(s, 1, &map, &[1])?;
            assert!(b.map_is_empty(s, 1, &map)?);
            assert!(!b.map_is_empty(s, 1, &other)?);
            // Cleared.
            b.map_put_all(s, 1, &map, &[(&[1], &[11]), (&[2], &[12])])?;
            assert!(!b.map_is_empty(s, 1, &map)?);
            b.map_clear(s, 1, &map)?;
            assert!(b.map_is_empty(s, 1, &map)?);
            // The only entry evicted (written back): the engine answers; then removed through the cache.
            b.map_put(s, 1, &map, &[3], &[13])?;
            b.set_rmw_cache_capacity(1)?;
            b.set_rmw_cache_capacity(64 << 20)?;
            assert!(!b.map_is_empty(s, 1, &map)?);
            b.map_remove(s, 1, &map, &[3])?;
            assert!(b.map_is_empty(s, 1, &map)?);
            // Handed off to a snapshot, then removed: the snapshot keeps the entry, the map is empty.
            b.map_put(s, 1, &map, &[4], &[14])?;
            let snap = b.snapshot()?;
            assert!(!b.map_is_empty(s, 1, &map)?);
            b.map_remove(s, 1, &map, &[4])?;
            assert!(b.map_is_empty(s, 1, &map)?);
            let mut held = Vec::new();
            snap.visit(s, 1, &mut |k, _| {
                held.push(k.to_vec());
                Ok(())
            })?;
            assert_eq!(
                held.len(),
                2,
                "the snapshot's entries of both maps: {held:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn successor_of_prefixes() {
        assert_eq!(prefix_successor(&[0, 1]), Some(vec![0, 2]));
        assert_eq!(prefix_successor(&[0, 0xFF]), Some(vec![1]));
        assert_eq!(prefix_successor(&[0xFF, 0xFF]), None);
        assert_eq!(prefix_successor(&[]), None);
    }
}
