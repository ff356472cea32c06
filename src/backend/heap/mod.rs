//! The heap backend: in-memory tables per state and key group, with cheap consistent snapshots.
//!
//! Every state has one table per key group of the backend's range. Value, list, reducing and aggregating
//! states use a hash table from entry key to value bytes; map states use a `map_table::MapTable`: a hash
//! table from key-and-namespace bytes to one small sorted map of user keys; timer states use a
//! `timer_table::TimerTable`: an ordered tree of their entries, for the queues' ordered reads. Entries are
//! stored as the working-state bytes of `crate::layout`, so a snapshot hands them to the savepoint encoder
//! unchanged.
//!
//! A snapshot clones every table (O(states × key groups), independent of the state size); the tables are
//! copy-on-write (`table`, `map_table`, `timer_table`), so writes after the snapshot never disturb it.
//! Any number of snapshots may be open at once; each is `Send + Sync` and is encoded on any thread.
//! Incremental TTL cleanup walks a state's tables from a cursor kept per state (`cleanup`). The state's size
//! (entries, estimated bytes) is published to [`HeapEngine`] handles and, on a
//! [`StateEnv`](crate::env::StateEnv), charged to its memory budget without a cap (`usage`).

pub(crate) mod bytes;
mod checkpoint;
mod cleanup;
mod fixed_map;
mod map_run;
pub(crate) mod map_table;
mod table;
pub(crate) mod table_file;
mod timer_table;
mod usage;
mod user_map;

pub use usage::{HeapEngine, ENTRY_OVERHEAD, REFRESH_WRITES, SAMPLE_ENTRIES};

/// The charge of a heap backend on a `StateEnv`: `reservation`, mirrored in the environment's `gauge`.
pub(crate) fn usage_charge(
    reservation: keyed_state_lsm::MemoryReservation,
    gauge: Arc<std::sync::atomic::AtomicUsize>,
) -> usage::HeapCharge {
    usage::HeapCharge::new(reservation, gauge)
}

use std::sync::Arc;

use self::bytes::SmallBytes;
use self::map_table::MapTable;
use self::table::{CowTable, KvTable, Rewrite};
use self::timer_table::TimerTable;
use super::{out_of_range, wrong_kind, BackendConfig, BackendSnapshot, StateBackend, StateId};
use crate::error::{Error, Result};
use crate::keygroup::KeyGroup;
use crate::meta::{StateKind, StateMetaInfo};

/// The tables of one state: one per key group of the backend's range.
enum StateTables {
    Kv(Vec<CowTable>),
    Map(Vec<MapTable>),
    Timer(Vec<TimerTable>),
}

impl Clone for StateTables {
    fn clone(&self) -> Self {
        match self {
            StateTables::Kv(t) => StateTables::Kv(t.clone()),
            StateTables::Map(t) => StateTables::Map(t.clone()),
            StateTables::Timer(t) => StateTables::Timer(t.clone()),
        }
    }
}

/// The table of one (state, key group) reached through the `map_*` operations.
enum Ordered<'a> {
    Map(&'a mut MapTable),
    Timer(&'a mut TimerTable),
}

impl StateTables {
    fn new(kind: StateKind, groups: usize) -> Self {
        match kind {
            StateKind::Map => StateTables::Map((0..groups).map(|_| MapTable::default()).collect()),
            StateKind::Timers => {
                StateTables::Timer((0..groups).map(|_| TimerTable::default()).collect())
            }
            _ => StateTables::Kv((0..groups).map(|_| CowTable::default()).collect()),
        }
    }
}

/// The heap backend: copy-on-write tables per (state, key group); see
/// `design/decisions/0002-heap-tables.md`.
pub struct HeapBackend {
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    tables: Vec<StateTables>,
    /// Incremental TTL cleanup cursors, per state id.
    cleanup: Vec<cleanup::CleanupCursor>,
    /// Length of the key-group prefix of entry keys (1 or 2 bytes): tables store keys without it.
    prefix_len: usize,
    /// Checkpoint file numbers of the tables (`checkpoint`).
    numbering: checkpoint::Numbering,
    /// The state's size figures and their charge to an environment (`usage`).
    usage: usage::UsageTracker,
}

impl HeapBackend {
    /// Visits the entries of `state` in key group `kg`, the `index`-th of the range, with full entry keys,
    /// until `f` returns `false`. Returns whether it ran to the end.
    fn scan_group(
        &self,
        state: StateId,
        index: usize,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<bool> {
        let mut go = true;
        match self.tables.get(state) {
            Some(StateTables::Kv(groups)) => {
                let mut full = Vec::new();
                if let Some(t) = groups.get(index) {
                    t.for_each(&mut |k, v| {
                        with_prefix(&mut full, kg, self.prefix_len, k);
                        go = f(&full, v);
                        go
                    });
                }
            }
            Some(StateTables::Map(groups)) => {
                let mut prefix = Vec::with_capacity(2);
                with_prefix(&mut prefix, kg, self.prefix_len, &[]);
                if let Some(t) = groups.get(index) {
                    go = t.for_each(&prefix, f);
                }
            }
            Some(StateTables::Timer(groups)) => {
                let mut full = Vec::new();
                if let Some(t) = groups.get(index) {
                    t.scan_from(&[], &mut |k, v| {
                        with_prefix(&mut full, kg, self.prefix_len, k);
                        go = f(&full, v);
                        go
                    });
                }
            }
            None => return Err(Error::UnknownStateId(state)),
        }
        Ok(go)
    }

    /// A heap backend for `config`'s key-group range.
    pub fn new(config: BackendConfig) -> Result<Self> {
        config.validate()?;
        let prefix_len = crate::keygroup::key_group_prefix_len(config.max_parallelism);
        Ok(HeapBackend {
            config,
            states: Vec::new(),
            tables: Vec::new(),
            cleanup: Vec::new(),
            prefix_len,
            numbering: checkpoint::Numbering::default(),
            usage: usage::UsageTracker::default(),
        })
    }

    /// A shared handle on the backend's size figures (entries, estimated bytes; see [`HeapEngine`]), valid
    /// after the backend is moved into a store.
    pub fn engine(&self) -> HeapEngine {
        HeapEngine(Arc::clone(&self.usage.figures))
    }

    /// Charges the state's estimated bytes to `charge` from now on (a backend on a `StateEnv`).
    pub(crate) fn charge_to(&mut self, charge: usage::HeapCharge) {
        self.usage.set_charge(charge);
        self.refresh_usage();
    }

    /// Counts entries and, when due, measures the mean entry size again; publishes the figures and resizes
    /// the charge to the environment. The backend does this by itself every [`REFRESH_WRITES`] writes
    /// (or 8 per table of (state, key group) when more), after bulk changes and at snapshots and checkpoints.
    pub fn refresh_usage(&mut self) {
        let entries = self.count_entries();
        let sample = self
            .usage
            .needs_sample(entries)
            .then(|| self.sample_entry_bytes());
        self.usage.publish(self.states.len(), entries, sample);
    }

    /// Entries of every table (O(states × key groups)).
    fn count_entries(&self) -> u64 {
        let mut n = 0u64;
        for t in &self.tables {
            n += match t {
                StateTables::Kv(groups) => groups.iter().map(|g| g.len() as u64).sum::<u64>(),
                StateTables::Map(groups) => groups.iter().map(|g| g.len() as u64).sum::<u64>(),
                StateTables::Timer(groups) => groups.iter().map(|g| g.len() as u64).sum::<u64>(),
            };
        }
        n
    }

    /// Visits up to [`SAMPLE_ENTRIES`] entries spread over the tables: (entries visited, their estimated
    /// bytes).
    fn sample_entry_bytes(&self) -> (u64, u64) {
        let tables: usize = self
            .tables
            .iter()
            .map(|t| match t {
                StateTables::Kv(g) => g.len(),
                StateTables::Map(g) => g.len(),
                StateTables::Timer(g) => g.len(),
            })
            .sum();
        let per_table = (SAMPLE_ENTRIES / tables.max(1)).max(1);
        let (mut n, mut bytes) = (0u64, 0u64);
        let mut take = |seen: &mut usize, k: &[u8], v: &[u8]| {
            n += 1;
            bytes += usage::entry_bytes(k, v);
            *seen += 1;
            *seen < per_table
        };
        for t in &self.tables {
            match t {
                StateTables::Kv(groups) => groups.iter().for_each(|g| {
                    let mut seen = 0;
                    g.for_each(&mut |k, v| take(&mut seen, k, v));
                }),
                StateTables::Map(groups) => groups.iter().for_each(|g| {
                    let mut seen = 0;
                    g.for_each(&[], &mut |k, v| take(&mut seen, k, v));
                }),
                StateTables::Timer(groups) => groups.iter().for_each(|g| {
                    let mut seen = 0;
                    g.scan_from(&[], &mut |k, v| take(&mut seen, k, v));
                }),
            }
        }
        (n, bytes)
    }

    /// Counts a write; refreshes the figures when due.
    #[inline]
    fn wrote(&mut self) {
        if self.usage.tick() {
            self.refresh_usage();
        }
    }

    #[inline]
    fn group_index(&self, kg: KeyGroup) -> Result<usize> {
        match self.config.key_group_range.index_of(kg) {
            Some(g) => Ok(g),
            None => Err(out_of_range(self.config.key_group_range, kg)),
        }
    }

    /// The hash table of (`state`, `kg`) and `key` without its key-group prefix.
    #[inline]
    fn kv<'k>(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key: &'k [u8],
        op: &'static str,
    ) -> Result<(&mut CowTable, &'k [u8])> {
        let g = self.group_index(kg)?;
        let suffix = strip_prefix(key, self.prefix_len)?;
        match self.tables.get_mut(state) {
            Some(StateTables::Kv(t)) => match t.get_mut(g) {
                Some(t) => Ok((t, suffix)),
                None => Err(unknown_state(state)),
            },
            _ => Err(wrong_kind(&self.states, state, op)),
        }
    }

    /// Read-only [`kv`](Self::kv).
    #[inline]
    fn kv_ref<'k>(
        &self,
        state: StateId,
        kg: KeyGroup,
        key: &'k [u8],
        op: &'static str,
    ) -> Result<(&CowTable, &'k [u8])> {
        let g = self.group_index(kg)?;
        let suffix = strip_prefix(key, self.prefix_len)?;
        match self.tables.get(state) {
            Some(StateTables::Kv(t)) => match t.get(g) {
                Some(t) => Ok((t, suffix)),
                None => Err(unknown_state(state)),
            },
            _ => Err(self.wrong_kind(state, op)),
        }
    }

    /// The map or timer table of (`state`, `kg`) and `key_ns` without its key-group prefix.
    #[inline]
    fn ordered<'k>(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &'k [u8],
        op: &'static str,
    ) -> Result<(Ordered<'_>, &'k [u8])> {
        let g = self.group_index(kg)?;
        let suffix = strip_prefix(key_ns, self.prefix_len)?;
        let table = match self.tables.get_mut(state) {
            Some(StateTables::Map(t)) => t.get_mut(g).map(Ordered::Map),
            Some(StateTables::Timer(t)) => t.get_mut(g).map(Ordered::Timer),
            _ => return Err(wrong_kind(&self.states, state, op)),
        };
        match table {
            Some(t) => Ok((t, suffix)),
            None => Err(unknown_state(state)),
        }
    }

    fn wrong_kind(&self, state: StateId, op: &'static str) -> Error {
        wrong_kind(&self.states, state, op)
    }
}

impl StateBackend for HeapBackend {
    fn backend_name(&self) -> &'static str {
        "heap"
    }

    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn register_state(&mut self, meta: StateMetaInfo) -> Result<StateId> {
        if let Some(id) = super::reregister(&mut self.states, &meta)? {
            return Ok(id);
        }
        let groups = self.config.key_group_range.len();
        self.tables.push(StateTables::new(meta.kind, groups));
        self.cleanup.push(cleanup::CleanupCursor::default());
        self.states.push(meta);
        self.usage.set_tables(self.tables.len() * groups);
        Ok(self.states.len() - 1)
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    #[inline]
    fn get(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<Option<&[u8]>> {
        let (t, key) = self.kv_ref(state, kg, key, "get")?;
        Ok(t.get(key))
    }

    #[inline]
    fn put(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        let (t, key) = self.kv(state, kg, key, "put")?;
        t.put(key, value);
        self.wrote();
        Ok(())
    }

    #[inline]
    fn delete(&mut self, state: StateId, kg: KeyGroup, key: &[u8]) -> Result<()> {
        let (t, key) = self.kv(state, kg, key, "delete")?;
        t.remove(key);
        self.wrote();
        Ok(())
    }

    fn append(&mut self, state: StateId, kg: KeyGroup, key: &[u8], elements: &[u8]) -> Result<()> {
        if elements.is_empty() {
            return Ok(());
        }
        let (t, key) = self.kv(state, kg, key, "append")?;
        t.append(key, crate::layout::LIST_DELIMITER, elements);
        self.wrote();
        Ok(())
    }

    fn map_get(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<Option<&[u8]>> {
        let found = match self.ordered(state, kg, key_ns, "map_get")? {
            (Ordered::Map(t), key_ns) => t.get(key_ns, user_key),
            (Ordered::Timer(t), key_ns) => t.get(key_ns, user_key),
        };
        Ok(found.map(SmallBytes::as_slice))
    }

    fn map_put(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        match self.ordered(state, kg, key_ns, "map_put")? {
            (Ordered::Map(t), key_ns) => t.put(key_ns, user_key, value),
            (Ordered::Timer(t), key_ns) => t.put(key_ns, user_key, value),
        }
        self.wrote();
        Ok(())
    }

    fn map_remove(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        user_key: &[u8],
    ) -> Result<()> {
        match self.ordered(state, kg, key_ns, "map_remove")? {
            (Ordered::Map(t), key_ns) => t.remove(key_ns, user_key),
            (Ordered::Timer(t), key_ns) => {
                t.remove_entry(key_ns, user_key);
            }
        }
        self.wrote();
        Ok(())
    }

    fn map_scan(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        match self.ordered(state, kg, key_ns, "map_scan")? {
            (Ordered::Map(t), key_ns) => t.scan(key_ns, f),
            (Ordered::Timer(t), key_ns) => t.scan_map_from(key_ns, &[], f),
        }
        Ok(())
    }

    fn map_scan_from(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        key_ns: &[u8],
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        match self.ordered(state, kg, key_ns, "map_scan")? {
            (Ordered::Map(t), key_ns) => t.scan_from(key_ns, from, f),
            (Ordered::Timer(t), key_ns) => t.scan_map_from(key_ns, from, f),
        }
        Ok(())
    }

    fn map_clear(&mut self, state: StateId, kg: KeyGroup, key_ns: &[u8]) -> Result<()> {
        match self.ordered(state, kg, key_ns, "map_clear")? {
            (Ordered::Map(t), key_ns) => t.clear(key_ns),
            (Ordered::Timer(t), key_ns) => t.remove_prefix(key_ns),
        }
        self.wrote();
        Ok(())
    }

    fn scan_state(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(KeyGroup, &[u8], &[u8]) -> bool,
    ) -> Result<()> {
        for (i, kg) in self.config.key_group_range.iter().enumerate() {
            if !self.scan_group(state, i, kg, &mut |k, v| f(kg, k, v))? {
                break;
            }
        }
        Ok(())
    }

    fn scan_key_group(
        &mut self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let range = self.config.key_group_range;
        if !range.contains(kg) {
            return Err(super::out_of_range(range, kg));
        }
        let i = usize::from(kg - range.start());
        self.scan_group(state, i, kg, f).map(|_| ())
    }

    fn transform_values(
        &mut self,
        state: StateId,
        f: &mut dyn FnMut(&[u8]) -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        let mut failure: Option<Error> = None;
        let mut apply = |v: &[u8]| -> Rewrite {
            if failure.is_some() {
                return Rewrite::Keep;
            }
            match f(v) {
                Ok(Some(new)) => Rewrite::Replace(new),
                Ok(None) => Rewrite::Remove,
                Err(e) => {
                    failure = Some(e);
                    Rewrite::Keep
                }
            }
        };
        match self.tables.get_mut(state) {
            Some(StateTables::Kv(groups)) => {
                for t in groups {
                    t.retain(&mut |_, v| apply(v));
                }
            }
            Some(StateTables::Map(groups)) => {
                for t in groups {
                    t.retain(&mut |_, v| retain_by(&mut apply, v));
                }
            }
            Some(StateTables::Timer(groups)) => {
                for t in groups {
                    t.retain(&mut |_, v| retain_by(&mut apply, v));
                }
            }
            None => return Err(Error::UnknownStateId(state)),
        }
        self.refresh_usage();
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn load_entry(&mut self, state: StateId, kg: KeyGroup, key: &[u8], value: &[u8]) -> Result<()> {
        let g = self.group_index(kg)?;
        match self.tables.get_mut(state) {
            Some(StateTables::Kv(groups)) => {
                groups[g].put(strip_prefix(key, self.prefix_len)?, value)
            }
            Some(StateTables::Map(groups)) => {
                groups[g].load(strip_prefix(key, self.prefix_len)?, value)
            }
            Some(StateTables::Timer(groups)) => {
                groups[g].insert(strip_prefix(key, self.prefix_len)?, value)
            }
            None => return Err(Error::UnknownStateId(state)),
        }
        Ok(())
    }

    fn finish_load(&mut self) -> Result<()> {
        for t in &mut self.tables {
            if let StateTables::Map(groups) = t {
                groups.iter_mut().for_each(MapTable::finish_load);
            }
        }
        self.refresh_usage();
        Ok(())
    }

    fn num_entries(&mut self) -> Result<u64> {
        Ok(self.count_entries())
    }

    fn snapshot(&mut self) -> Result<Box<dyn BackendSnapshot>> {
        self.refresh_usage();
        Ok(Box::new(HeapSnapshot {
            prefix_len: self.prefix_len,
            config: self.config.clone(),
            states: self.states.clone(),
            tables: Arc::new(self.tables.clone()),
        }))
    }

    fn checkpoint_capture(&mut self) -> Result<Box<dyn super::CheckpointCapture>> {
        self.refresh_usage();
        self.capture()
    }

    fn ttl_cleanup_step(
        &mut self,
        state: StateId,
        entries: usize,
        judge: &mut dyn FnMut(&[u8]) -> crate::ttl::TtlVerdict,
    ) -> Result<usize> {
        let (Some(tables), Some(cursor)) =
            (self.tables.get_mut(state), self.cleanup.get_mut(state))
        else {
            return Err(unknown_state(state));
        };
        let judged = match tables {
            StateTables::Kv(groups) => cursor.step_kv(groups, entries, judge),
            StateTables::Map(groups) => cursor.step_maps(groups, entries, judge),
            StateTables::Timer(groups) => cursor.step_timers(groups, entries, judge),
        };
        self.wrote();
        Ok(judged)
    }
}

/// Applies a [`Rewrite`] decision to one value in place; whether the entry stays.
fn retain_by(apply: &mut dyn FnMut(&[u8]) -> Rewrite, v: &mut SmallBytes) -> bool {
    match apply(v.as_slice()) {
        Rewrite::Keep => true,
        Rewrite::Replace(new) => {
            v.set(&new);
            true
        }
        Rewrite::Remove => false,
    }
}

#[cold]
fn unknown_state(state: StateId) -> Error {
    Error::UnknownStateId(state)
}

/// A point-in-time view of a [`HeapBackend`]: clones of its tables.
pub struct HeapSnapshot {
    prefix_len: usize,
    config: BackendConfig,
    states: Vec<StateMetaInfo>,
    tables: Arc<Vec<StateTables>>,
}

impl BackendSnapshot for HeapSnapshot {
    fn config(&self) -> &BackendConfig {
        &self.config
    }

    fn states(&self) -> &[StateMetaInfo] {
        &self.states
    }

    fn visit(
        &self,
        state: StateId,
        kg: KeyGroup,
        f: &mut dyn FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some(g) = self.config.key_group_range.index_of(kg) else {
            return Ok(());
        };
        match self.tables.get(state) {
            Some(StateTables::Kv(groups)) => {
                // The state API never stores an empty value in these tables (empty lists are absent;
                // timers, whose values are empty, have their own tables), so skip those defensively.
                let mut full = Vec::new();
                groups[g].for_each_sorted(&mut |k, v| {
                    if !v.is_empty() {
                        with_prefix(&mut full, kg, self.prefix_len, k);
                        f(&full, v)?;
                    }
                    Ok(())
                })
            }
            Some(StateTables::Map(groups)) => {
                let mut prefix = Vec::with_capacity(2);
                with_prefix(&mut prefix, kg, self.prefix_len, &[]);
                groups[g].for_each_sorted(&prefix, f)
            }
            Some(StateTables::Timer(groups)) => {
                let mut full = Vec::new();
                let mut result = Ok(());
                groups[g].scan_from(&[], &mut |k, v| {
                    with_prefix(&mut full, kg, self.prefix_len, k);
                    result = f(&full, v);
                    result.is_ok()
                });
                result
            }
            None => Err(Error::UnknownStateId(state)),
        }
    }
}

/// `key` without its `prefix_len`-byte key-group prefix.
#[inline]
fn strip_prefix(key: &[u8], prefix_len: usize) -> Result<&[u8]> {
    match key.get(prefix_len..) {
        Some(rest) => Ok(rest),
        None => Err(short_key(key.len(), prefix_len)),
    }
}

#[cold]
fn short_key(len: usize, prefix_len: usize) -> Error {
    Error::InvalidArgument(format!(
        "entry key of {len} bytes is shorter than its {prefix_len}-byte key-group prefix"
    ))
}

/// Writes `KG | suffix` into `out` (cleared first).
#[inline]
fn with_prefix(out: &mut Vec<u8>, kg: KeyGroup, prefix_len: usize, suffix: &[u8]) {
    out.clear();
    crate::keygroup::write_key_group_prefix(out, kg, prefix_len);
    out.extend_from_slice(suffix);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keygroup::KeyGroupRange;
    use crate::serializer::{BytesSerializer, LongSerializer, StringSerializer};
    use crate::state::{KeyedStateStore, ValueStateDescriptor};

    /// `visit` yields strictly ascending entry keys, also for keys that share their first 16 bytes, differ
    /// only in length or trailing zero bytes, and for long (shared) values.
    #[test]
    fn visit_is_in_byte_order() {
        let config = KeyedStateStore::config_for(&StringSerializer, 1, KeyGroupRange::all(1));
        let mut store = KeyedStateStore::new(
            Box::new(HeapBackend::new(config).unwrap()),
            StringSerializer,
        )
        .unwrap();
        let h = store
            .register_value(ValueStateDescriptor::new("v", BytesSerializer))
            .unwrap();
        let mut keys = Vec::new();
        for n in 0..40usize {
            keys.push("a".repeat(n));
            keys.push(format!("{}\0", "a".repeat(n)));
            keys.push(format!("{}b{n}", "a".repeat(n)));
            keys.push(format!("{}\u{1}", "a".repeat(n)));
        }
        for (i, k) in keys.iter().enumerate() {
            store.set_current_key(k).unwrap();
            store
                .value(&h)
                .unwrap()
                .update(&vec![i as u8; i % 50])
                .unwrap();
        }
        let snap = store.snapshot().unwrap();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        snap.visit(0, 0, &mut |k, _| {
            seen.push(k.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), keys.len());
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "not strictly ascending"
        );

        // Fixed-length keys sharing the key-group byte and most key bytes.
        let config = KeyedStateStore::config_for(&LongSerializer, 1, KeyGroupRange::all(1));
        let mut store =
            KeyedStateStore::new(Box::new(HeapBackend::new(config).unwrap()), LongSerializer)
                .unwrap();
        let h = store
            .register_value(ValueStateDescriptor::new("v", LongSerializer))
            .unwrap();
        for k in (0..2000i64).rev().chain([i64::MIN, -1, i64::MAX]) {
            store.set_current_key(&k).unwrap();
            store.value(&h).unwrap().update(&k).unwrap();
        }
        let snap = store.snapshot().unwrap();
        let mut prev: Option<Vec<u8>> = None;
        let mut n = 0;
        snap.visit(0, 0, &mut |k, _| {
            assert!(prev.as_deref().is_none_or(|p| p < k));
            prev = Some(k.to_vec());
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2003);
    }
    /// The first list append that a key group's packed table cannot hold (a 17-byte value among 8-byte
    /// ones) converts that table a bounded part per write: a write moves its own entry only until half the
    /// table is unpacked, then at most `CONVERT_BUCKETS_PER_WRITE` entries more; every entry stays readable
    /// throughout, and a savepoint taken mid-conversion is byte-identical to one of the same entries held
    /// unpacked.
    #[test]
    fn a_write_to_a_large_packed_table_converts_a_bounded_part_and_snapshots_mid_conversion_encode_alike(
    ) {
        use crate::savepoint::{encode, WriteOptions};
        use crate::serializer::SerializerSnapshot;
        use std::collections::BTreeMap;

        const KG: KeyGroup = 5;
        const ENTRIES: i64 = 254_000;
        let config = BackendConfig {
            max_parallelism: 128,
            key_group_range: KeyGroupRange::all(128),
            key_serializer: SerializerSnapshot::simple("LongSerializer", 1),
        };
        let meta = StateMetaInfo {
            name: "list".into(),
            kind: StateKind::List,
            namespace_serializer: SerializerSnapshot::simple("VoidNamespaceSerializer", 1),
            value_serializer: SerializerSnapshot::simple("LongSerializer", 1),
            ttl: None,
        };
        let key = |i: i64| {
            let mut k = vec![KG as u8];
            k.extend_from_slice(&i.to_be_bytes());
            k.push(0);
            k
        };
        let table = |b: &HeapBackend| match &b.tables[0] {
            StateTables::Kv(groups) => groups[KG as usize].clone(),
            _ => panic!("not a kv state"),
        };
        let savepoint = |b: &mut HeapBackend| {
            let snap = b.snapshot().unwrap();
            let mut out = Vec::new();
            encode(&*snap, &WriteOptions::default(), &mut out).unwrap();
            out
        };

        let mut b = HeapBackend::new(config.clone()).unwrap();
        let s = b.register_state(meta.clone()).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for i in 0..ENTRIES {
            let v = (i * 7).to_be_bytes();
            b.append(s, KG, &key(i), &v).unwrap();
            model.insert(key(i), v.to_vec());
        }
        assert_eq!(table(&b).packed_len(), ENTRIES as usize);

        let check = |b: &mut HeapBackend, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
            for (k, v) in model {
                assert_eq!(b.get(s, KG, k).unwrap(), Some(&v[..]), "key {k:02x?}");
            }
            assert_eq!(b.num_entries().unwrap(), model.len() as u64);
            let snap = b.snapshot().unwrap();
            let mut seen = Vec::new();
            snap.visit(s, KG, &mut |k, v| {
                seen.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
            assert!(seen.iter().map(|(k, v)| (k, v)).eq(model.iter()));
        };

        // Writes of every kind: appends (growing a value), updates, removals and new keys.
        let mut writes = 0usize;
        let mut mid_savepoint = None;
        let mut i = 0i64;
        let mut drained_in = 0usize;
        loop {
            let before = table(&b).packed_len();
            // Whether this write may cross into draining (it and a following insert each move one entry).
            let draining = table(&b).len() - before + 2 >= before.saturating_sub(2);
            drained_in += usize::from(draining);
            let k = key(i * 997 % ENTRIES);
            match i % 4 {
                0 | 1 => {
                    b.append(s, KG, &k, &[1u8; 8]).unwrap();
                    let v = model.get_mut(&k).unwrap();
                    v.push(crate::layout::LIST_DELIMITER);
                    v.extend_from_slice(&[1u8; 8]);
                }
                2 => {
                    b.put(s, KG, &k, &[2u8; 8]).unwrap();
                    model.insert(k, vec![2u8; 8]);
                }
                _ => {
                    b.delete(s, KG, &k).unwrap();
                    model.remove(&k);
                    let n = key(ENTRIES + i);
                    b.put(s, KG, &n, &[3u8; 8]).unwrap();
                    model.insert(n, vec![3u8; 8]);
                }
            }
            writes += 1;
            i += 1;
            let t = table(&b);
            let moved = before - t.packed_len();
            // A delete-and-insert is two writes.
            let per_write = if draining || i % 4 == 0 {
                table::CONVERT_BUCKETS_PER_WRITE + 1
            } else {
                1
            };
            let bound = if i % 4 == 0 { 2 } else { 1 } * per_write;
            assert!(moved <= bound, "write {writes} moved {moved} entries");
            if writes == 1 {
                assert!(
                    t.is_converting(),
                    "the first growing append starts a conversion"
                );
            }
            if writes == 40 {
                assert!(t.is_converting() && t.packed_len() > 0);
                check(&mut b, &model);
                // A snapshot taken now and encoded after more writes: the entries as they were.
                let snap = b.snapshot().unwrap();
                mid_savepoint = Some((snap, model.clone()));
            }
            if !t.is_converting() {
                break;
            }
            assert!(writes < 250_000, "the conversion does not end");
        }
        assert_eq!(table(&b).packed_len(), 0);
        // 254,000 entries in 524,288 buckets: 512 draining writes (a delete-and-insert drains twice).
        assert!(drained_in <= 512 + 1, "{drained_in} draining writes");
        check(&mut b, &model);

        // The mid-conversion snapshot encodes exactly as the same entries in a table never packed: a
        // backend given the long value first.
        let (snap, then) = mid_savepoint.unwrap();
        let mut mid = Vec::new();
        encode(&*snap, &WriteOptions::default(), &mut mid).unwrap();
        let mut reference = HeapBackend::new(config).unwrap();
        let rs = reference.register_state(meta).unwrap();
        let (long_k, long_v) = then.iter().find(|(_, v)| v.len() > 8).unwrap();
        reference.put(rs, KG, long_k, long_v).unwrap();
        for (k, v) in &then {
            reference.put(rs, KG, k, v).unwrap();
        }
        match &reference.tables[0] {
            StateTables::Kv(groups) => assert_eq!(groups[KG as usize].packed_len(), 0),
            _ => unreachable!(),
        }
        assert!(mid == savepoint(&mut reference), "savepoints differ");
    }
}
